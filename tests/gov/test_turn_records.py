"""GOV-2: each model turn records what it was sent under (the versions of the
configuration, its provider and each source, the zone, what was withheld), and the
inspector, the run page and the admin show a past turn from that record, never
recomposed from today's catalog. The newcomer's misreport: after an mcp-demo run's
provider was switched, the inspector showed turn 2 as having sent "Withheld by the
context gate…", though turn 2 went whole to the old provider and only turn 3 withheld.
Since CG-12 such a switch refuses turn 3 (turn 2's reply read the restricted result); a
tool's class raised while the run waits still withholds."""

from __future__ import annotations

import dataclasses

import pytest

from agentruns import events as ev
from agentruns.classes import DataClass
from agentruns.models import Configuration, Event, Run
from agentruns.runtime.loop import execute_run
from agentruns.services.changes import catalog_save
from agentruns.tools.registry import REGISTRY
from playground.inspector import inspector_context
from tests.conftest import grant
from tests.gate.test_withheld_results import (
    BUILT_IN,
    NOTE,
    approve_and_finish,
    parked,
    repoint,
)
from tests.support.catalog import KEY, KEY_ENV, make_snippet
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import active_ticket, allow, client_for, resume

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


def records(run: Run) -> list[dict]:
    turns = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")
    return [turn.payload for turn in turns]


def test_gov2_a_past_turn_is_shown_as_sent_after_the_provider_is_switched(approver, fake):
    """Since CG-12 the switch no longer lets turn 3 go out with the result withheld: the
    reply of turn 2 read the restricted result and carries its class, so the send after
    the switch is refused. Turns 1 and 2 are still shown as they were sent (local, whole,
    to the old provider), from their record, not from today's catalog."""
    run = parked(approver, fake, BUILT_IN, zone="local")
    sent_before = len(fake.requests)
    repoint(fake, "external_global")  # staff switch the provider in the admin
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert (run.failure["code"], run.failure["source_kind"], run.failure["source_name"]) == (
        "context_refused",
        "reply",
        "turn 2",
    )
    assert len(fake.requests) == sent_before  # the refused send went nowhere

    turns = inspector_context(Run.objects.get(pk=run.pk))["turns"]

    assert len(turns) == 2
    assert [t.sent["zone"] for t in turns] == ["local", "local"]
    assert [t.sent["withheld"] for t in turns] == [[], []]
    assert [t.served_by["provider"] for t in turns] == ["lookup-openai", "lookup-openai"]
    sent = [payload["sent"] for payload in records(run)]
    assert [s["zone"] for s in sent] == ["local", "local"]
    assert all(s["withheld"] == [] for s in sent)


def test_gov2_a_past_turn_is_shown_as_sent_after_the_results_class_is_raised(
    approver, fake, monkeypatch
):
    """The newcomer's misreport, where a later send withholds and is not refused (CG-12
    labels turn 2's reply with the class the result had when it was sent): turn 2 went
    whole, only turn 3 withheld."""
    lowered = dataclasses.replace(REGISTRY.get(BUILT_IN.read), output_class=DataClass.INTERNAL)
    monkeypatch.setitem(REGISTRY._tools, BUILT_IN.read, lowered)
    run = parked(approver, fake, BUILT_IN, zone="external_eu")
    raised = dataclasses.replace(lowered, output_class=DataClass.RESTRICTED)  # a deploy
    monkeypatch.setitem(REGISTRY._tools, BUILT_IN.read, raised)
    run = approve_and_finish(approver, run)

    turns = inspector_context(Run.objects.get(pk=run.pk))["turns"]

    assert len(turns) == 3
    second = [m for m in turns[1].history if m["role"] == "tool"]
    third = [m for m in turns[2].history if m["role"] == "tool"]
    assert BUILT_IN.needle in second[0]["content"] and NOTE not in second[0]["content"]
    assert third[0]["content"].startswith(NOTE)
    sent = [payload["sent"] for payload in records(run)]
    assert [s["zone"] for s in sent] == ["external_eu"] * 3
    assert sent[1]["withheld"] == [] and len(sent[2]["withheld"]) == 1


def test_gov2_each_turn_records_the_versions_it_was_sent_under(approver, fake):
    run = parked(approver, fake, BUILT_IN, zone="local")
    configuration = Configuration.objects.get(slug="lookup")
    snippet = make_snippet("policy", data_class="internal")
    configuration.configurationsnippet_set.create(snippet=snippet, position=0)
    Configuration.objects.filter(pk=configuration.pk).update(version=7)
    run = approve_and_finish(approver, run)

    first, *_, last = [payload["sent"] for payload in records(run)]

    assert first["configuration_version"] == 1 and first["sources"] == {}
    assert last["configuration_version"] == 7 and last["sources"] == {"snippet:policy": 1}
    assert last["provider_version"] == 1 and last["ceiling"] == "secret"
    summary = ev.summary(ev.ASSISTANT, records(run)[-1])
    assert "sent to lookup-openai v1 (local, ceiling secret) under lookup v7" in summary
    assert "snippet:policy v1" in summary


def test_gov2_the_api_says_which_configuration_version_a_run_started_under(approver, fake):
    run = parked(approver, fake, BUILT_IN, zone="local")

    body = client_for(approver).get(f"/api/runs/{run.pk}/").json()

    assert body["configuration_version"] == 1


def test_gov2_a_past_turn_shows_the_source_text_it_carried_not_todays(approver, fake, staff):
    def create():
        return make_snippet("policy", data_class="internal", text="the words then")

    snippet = catalog_save(kind="snippet", pk=None, user=staff, save=create).obj
    run = parked(approver, fake, BUILT_IN, zone="local")
    Configuration.objects.get(slug="lookup").configurationsnippet_set.create(snippet=snippet)
    run = approve_and_finish(approver, run)

    def edit():
        snippet.text = "the words today"
        snippet.save()
        return snippet

    catalog_save(kind="snippet", pk=snippet.pk, user=staff, save=edit)
    system = "\n".join(inspector_context(Run.objects.get(pk=run.pk))["system"])

    assert "the words then" in system and "the words today" not in system
