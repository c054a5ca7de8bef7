"""The configuration's admin page explains and offers only what makes sense: four-eyes
(HITL-8, who may approve) and the quorum (HITL-13, how many) each say what they do and how
they differ; the Delegates list never offers the configuration itself (DEL-3: a self-
delegation is refused on save anyway) and, like the approver groups, has no "+" floating
beside its checkboxes."""

from __future__ import annotations

import re

import pytest

from tests.support.catalog import configuration_admin_post, make_configuration

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(admin_client):
    triage = make_configuration("triage")
    lookup = make_configuration("lookup")
    body = admin_client.get(f"/admin/agentruns/configuration/{triage.pk}/change/")
    assert body.status_code == 200
    return body.content.decode(), triage, lookup


def test_del3_the_delegates_list_does_not_offer_the_configuration_itself(page):
    body, triage, lookup = page
    offered = set(re.findall(r'name="delegates" value="(\d+)"', body))
    assert str(lookup.pk) in offered
    assert str(triage.pk) not in offered


def test_del3_a_self_delegation_posted_anyway_is_refused(admin_client, page):
    _, triage, _ = page
    url = f"/admin/agentruns/configuration/{triage.pk}/change/"
    data = configuration_admin_post("triage", "Triage", delegates=[triage.pk])
    response = admin_client.post(url, data)
    assert response.status_code == 200  # the form again, with the error
    assert triage.delegates.count() == 0


def test_ui1_checkbox_lists_of_related_records_have_no_add_link(page):
    body, _, _ = page
    assert 'id="add_id_delegates"' not in body
    assert 'id="add_id_approver_groups"' not in body
    assert 'id="add_id_provider"' in body  # a select keeps its "+"


def test_hitl8_hitl13_four_eyes_and_the_quorum_each_say_how_they_differ(page):
    body, _, _ = page

    def help_of(name: str) -> str:
        helptext = rf'<div class="help" id="id_{name}_helptext">\s*<div>(.*?)</div>'
        found = re.search(helptext, body, re.S)
        assert found, name
        return found.group(1)

    four_eyes = help_of("require_second_approver")
    assert "started a run may not approve" in four_eyes and "Approvals required" in four_eyes
    assert "How many different people must approve" in help_of("approvals_required")
