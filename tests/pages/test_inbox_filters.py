"""An inbox for a team (HITL-15, UI-2, UI-3): filters by configuration, by kind (approval
or question) and to "mine" (runs I started) are GET parameters, so they work without
JavaScript, stay in the URL, in the live poll's URL and in the redirect after a decision;
each choice shows its count under the other filters; each card says why its viewer sees
it. Values that name nothing are dropped, never an error."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.test import Client

from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, identity
from tests.support.routing import ASK_TURNS, WRITE_TURNS, person
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver():
    return person("ada")


@pytest.fixture
def tickets(approver, member):
    """Two approvals and a question from `member`, one approval the approver started."""
    scripted_configuration("billing", WRITE_TURNS)
    scripted_configuration("support", WRITE_TURNS)
    scripted_configuration("survey", ASK_TURNS)
    runs = {
        "billing": park(member, "billing"),
        "support": park(member, "support"),
        "survey": park(member, "survey"),
        "mine": park(approver, "billing"),
    }
    return {name: active_ticket(run.pk) for name, run in runs.items()}


def get(user, url):
    client = Client()
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return unescape(response.content.decode())


def shown(html):
    return set(re.findall(r'data-ticket="([0-9a-f-]{36})"', html))


def ids(tickets, *names):
    return {str(tickets[name].correlation_id) for name in names}


def test_hitl15_no_filter_shows_everything_with_a_count_per_choice(approver, tickets):
    html = get(approver, "/inbox/")
    assert shown(html) == ids(tickets, "billing", "support", "survey", "mine")
    assert "billing (2)" in html and "support (1)" in html and "survey (1)" in html
    assert re.search(r'data-count="approval">\(3\)', html)
    assert re.search(r'data-count="question">\(1\)', html)
    assert re.search(r'data-count="mine">\(1\)', html)
    assert "Showing 4 tickets." in html


def test_hitl15_filter_by_configuration_kind_and_mine_with_plain_get(approver, tickets):
    assert shown(get(approver, "/inbox/?configuration=billing")) == ids(tickets, "billing", "mine")
    assert shown(get(approver, "/inbox/?kind=question")) == ids(tickets, "survey")
    assert shown(get(approver, "/inbox/?kind=approval")) == ids(
        tickets, "billing", "support", "mine"
    )
    html = get(approver, "/inbox/?mine=1")
    assert shown(html) == ids(tickets, "mine") and "(you)" in html  # an approver first
    both = get(approver, "/inbox/?configuration=billing&kind=approval&mine=1")
    assert shown(both) == ids(tickets, "mine")
    assert "Showing 1 ticket under this filter." in both and "Clear filters" in both


def test_hitl15_counts_follow_the_other_chosen_filters(approver, tickets):
    html = get(approver, "/inbox/?kind=question")
    assert "survey (1)" in html and "billing (2)" not in html  # no question in billing
    assert re.search(r'data-count="approval">\(3\)', html)  # its own facet: the others only
    html = get(approver, "/inbox/?configuration=billing")
    assert re.search(r'data-count="approval">\(2\)', html)
    assert re.search(r'data-count="question">\(0\)', html)


def test_hitl15_the_chosen_filter_is_kept_in_the_form_the_poll_and_the_redirect(approver, tickets):
    html = get(approver, "/inbox/?configuration=billing&kind=approval")
    assert '<option value="billing" selected>' in html
    assert 'name="kind" value="approval" checked' in html
    assert 'hx-get="/inbox/cards/?configuration=billing&kind=approval&signature=' in html
    assert 'name="next" value="/inbox/?configuration=billing&kind=approval"' in html
    client = Client()
    client.force_login(approver)
    polled = client.get("/inbox/cards/?configuration=billing&kind=approval&signature=x")
    assert shown(polled.content.decode()) == ids(tickets, "billing", "mine")
    ticket = tickets["billing"]
    body = {
        **identity(ticket),
        "kind": "permission",
        "decision": "deny",
        "note": "",
        "next": "/inbox/?configuration=billing&kind=approval",
    }
    decided = client.post(f"/inbox/{ticket.correlation_id}/resume/", body)
    assert decided.status_code == 302
    assert decided["Location"] == "/inbox/?configuration=billing&kind=approval"


def test_hitl15_values_that_name_nothing_are_dropped(approver, tickets):
    html = get(approver, "/inbox/?kind=<script>&mine=yes")
    assert shown(html) == ids(tickets, "billing", "support", "survey", "mine")
    assert "<script>" not in html.split("Approval inbox", 1)[1].split("</form>")[0]
    html = get(approver, "/inbox/?configuration=nowhere")
    assert shown(html) == set() and "nowhere (0)" in html
    assert "Nothing under this filter is waiting for you." in html


def test_hitl15_an_initiator_sees_only_their_questions_and_why(member, tickets):
    html = get(member, "/inbox/")
    assert shown(html) == ids(tickets, "survey") and "You started this run" in html
