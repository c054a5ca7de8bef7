"""TZ-1, CG-10: "undeclared" explained where it is shown. The playground's readout for a
configuration whose sources declare no class says what the verdict means and what to do;
an undeclared send's audit row says nothing was checked, not "to zone -, ceiling -"."""

from __future__ import annotations

import pytest

from agentruns.demo import load_demo_data
from agentruns.services.audit import AuditFilter, audit_records
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def test_tz1_the_readout_explains_an_undeclared_verdict_and_undeclared_sources(client, staff):
    client.force_login(staff)
    page = client.get("/playground/readout/", {"configuration": "question-demo"}).content.decode()
    assert "undeclared" in page
    assert "means no source of this send declares a data class" in page
    assert "has no data class: it constrains nothing" in page
    declared = client.get("/playground/readout/", {"configuration": "helpdesk"}).content.decode()
    assert "means no source of this send declares a data class" not in declared


def test_cg10_an_undeclared_sends_audit_row_says_nothing_was_checked(staff):
    park(staff, "question-demo")
    reasons = [r["reason"] for r in audit_records(AuditFilter()) if r["kind"] == "gate.undeclared"]
    assert reasons and all("nothing was checked against a ceiling" in r for r in reasons)
    assert not any("zone -" in r or "ceiling -" in r for r in reasons)


def test_tz1_an_inbox_card_explains_an_undeclared_gate(client, member):
    run = park(member, "question-demo")
    ticket = run.tickets.get()
    client.force_login(member)
    card = client.get(f"/inbox/{ticket.correlation_id}/").content.decode()
    assert "no source declares a data class, so nothing is held against the ceiling" in card


ADVICE = "Give the configuration, its snippets and skills a data class"


def test_tz1_the_advice_to_declare_classes_goes_only_to_who_can_change_configurations(
    client, staff, member
):
    run = park(member, "question-demo")
    client.force_login(member)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "means no source of this send declares a data class" in page
    assert ADVICE not in page and "(in the admin)" not in page

    own = park(staff, "question-demo")
    client.force_login(staff)  # keeps the catalog: may change configurations
    assert ADVICE in client.get(f"/runs/{own.pk}/").content.decode()
