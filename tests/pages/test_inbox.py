"""The approval inbox with Django's test client, as a browser without JavaScript would use
it (UI-2, UI-3, UI-5, UI-6, HITL-3, HITL-4, HITL-8, HITL-9, OPS-6): every card is a plain
POST with CSRF that goes through `run_resume`, and a refused post changes nothing and
says why in the words of `agentruns/words.py`."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentruns.models import Event, Run, Ticket, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.words import WORDS
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.concurrency import at_once
from tests.support.hitl import (
    active_ticket,
    identity,
    picture,
    results_by_call,
    run_events,
    write_call,
)
from tests.support.runs import park

pytestmark = pytest.mark.django_db

BODY = "<script>alert('x')</script> & more"
TURNS = [{"tool_calls": [write_call("Incident", BODY, call_id="call_w")]}, {"text": "done"}]
SCHEMA = {
    "type": "object",
    "properties": {
        "severity": {"type": "string", "enum": ["low", "high"]},
        "hours": {"type": "integer", "minimum": 0, "maximum": 72},
    },
    "required": ["severity"],
}
ASK = {"id": "call_q", "name": "ask_user", "arguments": {"question": "How bad?", "schema": SCHEMA}}


@pytest.fixture
def approver(django_user_model):
    return grant(django_user_model.objects.create_user("approver", password="pw"), "approve_run")


@pytest.fixture
def initiator(member):
    return member


@pytest.fixture
def approval(initiator):
    scripted_configuration("approve-me", TURNS)
    return park(initiator, "approve-me")


@pytest.fixture
def question(initiator):
    scripted_configuration("ask-me", [{"tool_calls": [ASK]}, {"text": "thanks"}])
    return park(initiator, "ask-me")


def signed_in(user, **kw) -> Client:
    client = Client(**kw)
    client.force_login(user)
    return client


def form(ticket: Ticket, **answer) -> dict:
    kind = "permission" if ticket.kind == Ticket.Kind.TOOL_PERMISSION else "input"
    return {**identity(ticket), "kind": kind, "next": "/inbox/", **answer}


def post(client: Client, ticket: Ticket, data: dict):
    return client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True)


def text(response) -> str:
    return unescape(response.content.decode())


def decided_events(run_id: int) -> list[Event]:
    return [e for e in run_events(run_id) if e.type == "ticket.decided"]


# --- what a card shows --------------------------------------------------------------------


def test_ui4_the_inbox_sends_anonymous_visitors_to_sign_in(client, approval):
    ticket = active_ticket(approval.pk)
    for path in ("/inbox/", f"/inbox/{ticket.correlation_id}/", "/inbox/cards/"):
        response = client.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_ui3_ui6_a_card_shows_the_call_its_binding_and_the_governance(approver, approval):
    ticket = active_ticket(approval.pk)
    page = signed_in(approver).get("/inbox/")
    html = page.content.decode()
    card = html[html.index(f'data-ticket="{ticket.correlation_id}"') :]
    assert f'href="/runs/{approval.pk}/"' in card
    assert "approve-me" in card and "member" in card  # configuration and initiator
    assert "<code>notes.write</code>" in card
    assert ticket.arguments_digest in card
    # Arguments pretty-printed and escaped, in a collapsible <details>.
    assert "<details" in card and "&lt;script&gt;alert" in card and "<script>alert" not in html
    assert "&quot;title&quot;: &quot;Incident&quot;" in card
    # The deadline as an absolute, server-rendered time, plus the countdown hook.
    assert ticket.deadline.strftime("%Y-%m-%d %H:%M:%S") + " UTC" in card
    assert "data-countdown" in card
    # UI-6: effective class, zone and ceiling from the run's readout.
    assert "Effective class:" in card and "reachable zone:" in card and "ceiling:" in card
    # UI-3: the accessible names.
    assert re.search(r'<label for="note-[^"]+">Note</label>', card)
    assert ">Approve</button>" in card and ">Deny</button>" in card


def test_ui2_every_preserved_control_has_an_id_htmx_can_select(approver, approval, question):
    """A poll that swaps the cards moves each `hx-preserve` control aside and back by
    `#id`; an id starting with a digit (a correlation id) or holding a dot is no CSS
    selector, the move back throws and every typed control is left below the footer."""
    html = signed_in(approver).get("/inbox/").content.decode()
    preserved = re.findall(r"<(?:input|select|textarea|details)\b[^>]*\bhx-preserve\b[^>]*>", html)
    assert len(preserved) >= 4  # the notes, the edit form's fields, the question's
    for tag in preserved:
        [dom_id] = re.findall(r'\bid="([^"]*)"', tag)
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", dom_id), tag


def test_ui6_a_forced_source_is_marked_forced_on_the_card(staff):
    from tests.support.catalog import make_snippet

    admin = grant(staff, "approve_run", "use_playground")  # FS-5: forcing is theirs
    snippet = make_snippet("runbook", "internal")
    scripted_configuration("forced-cfg", TURNS)
    run = park(admin, "forced-cfg", forced_snippets=[snippet.pk])
    html = signed_in(admin).get("/inbox/").content.decode()
    assert "<code>runbook</code>" in html
    assert 'tag-forced">forced</span>' in html
    assert f'data-ticket="{active_ticket(run.pk).correlation_id}"' in html


def test_ui2_a_poll_after_the_session_ended_sends_the_page_to_sign_in(client, approval):
    ticket = active_ticket(approval.pk)
    for path in ("/inbox/cards/?signature=x", f"/inbox/{ticket.correlation_id}/live/"):
        response = client.get(path, headers={"HX-Request": "true"})
        assert response.status_code == 200
        assert response["HX-Redirect"] == "/accounts/login/"


def test_hitl9_an_initiator_sees_their_question_but_not_their_runs_approvals(
    initiator, approval, question
):
    html = signed_in(initiator).get("/inbox/").content.decode()
    assert f'data-ticket="{active_ticket(question.pk).correlation_id}"' in html
    assert f'data-ticket="{active_ticket(approval.pk).correlation_id}"' not in html


def test_hitl9_someone_elses_ticket_page_is_a_404(django_user_model, question):
    other = django_user_model.objects.create_user("other")
    ticket = active_ticket(question.pk)
    assert signed_in(other).get(f"/inbox/{ticket.correlation_id}/").status_code == 404


def test_ui3_a_question_is_a_form_with_one_control_per_property(initiator, question):
    ticket = active_ticket(question.pk)
    html = signed_in(initiator).get(f"/inbox/{ticket.correlation_id}/").content.decode()
    cid = ticket.correlation_id
    assert "How bad?" in html
    assert f'<label for="q-{cid}-value__severity">Severity' in html
    assert re.search(rf'<select id="q-{cid}-value__severity" name="value\.severity"', html)
    assert f'<label for="q-{cid}-value__hours">Hours</label>' in html
    assert re.search(r'type="number"[^>]*name="value\.hours"[^>]*min="0"[^>]*max="72"', html)
    assert ">Answer</button>" in html


def test_ui2_a_nested_object_is_a_fieldset_of_its_own_controls(initiator, question):
    nested = {
        "type": "object",
        "properties": {
            "owner": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "urgent": {"type": "boolean"}},
            }
        },
    }
    ticket = active_ticket(question.pk)
    Ticket.objects.filter(pk=ticket.pk).update(schema=nested)
    html = signed_in(initiator).get(f"/inbox/{ticket.correlation_id}/").content.decode()
    fieldset = html[html.index('<fieldset class="answer-group">') : html.index("</fieldset>")]
    assert "<legend>Owner</legend>" in fieldset
    cid = ticket.correlation_id
    assert f'<label for="q-{cid}-value__owner__name">Name' in fieldset
    assert re.search(rf'<input type="checkbox" id="q-{cid}-value__owner__urgent"', fieldset)


def test_ops6_showing_a_card_decides_nothing(approver, approval):
    ticket = active_ticket(approval.pk)
    before = picture(approval.pk)
    client = signed_in(approver)
    for _ in range(2):
        assert client.get(f"/inbox/{ticket.correlation_id}/").status_code == 200
    # A refused answer's page stays at …/resume/: reloading it (a GET) opens the card.
    reloaded = client.get(f"/inbox/{ticket.correlation_id}/resume/")
    assert (
        reloaded.status_code == 302 and reloaded["Location"] == f"/inbox/{ticket.correlation_id}/"
    )
    assert picture(approval.pk) == before


def test_tool4_uncertain_calls_are_listed_for_approvers_only(approver, initiator, approval):
    ToolInvocation.objects.create(
        run=approval,
        turn_index=9,
        call_id="call_lost",
        tool="test.external_write",
        tool_version="1",
        arguments={"x": 1},
        arguments_digest="d",
        idempotency_key="uncertain-key",
        status=ToolInvocation.Status.UNCERTAIN,
        effect_sent_at=timezone.now(),
    )
    assert 'data-uncertain="call_lost"' in signed_in(approver).get("/inbox/").content.decode()
    assert "call_lost" not in signed_in(initiator).get("/inbox/").content.decode()


# --- deciding -----------------------------------------------------------------------------


def test_ui5_approve_goes_through_the_resume_service_and_redirects_back(approver, approval):
    ticket = active_ticket(approval.pk)
    client = signed_in(approver)
    response = client.post(
        f"/inbox/{ticket.correlation_id}/resume/", form(ticket, decision="allow", note="fine")
    )
    assert response.status_code == 302 and response["Location"] == "/inbox/"
    page = text(client.get("/inbox/"))
    assert "Approved: notes.write on run #" in page
    assert f'data-ticket="{ticket.correlation_id}"' not in page
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED and ticket.resolved_by == approver
    [decided] = decided_events(approval.pk)
    assert decided.payload["decision"] == "allow" and decided.payload["by"] == "approver"
    assert execute_run(approval.pk) == "completed"


def test_hitl5_deny_with_a_note_reaches_the_model_as_the_calls_result(approver, approval):
    ticket = active_ticket(approval.pk)
    page = text(post(signed_in(approver), ticket, form(ticket, decision="deny", note="not now")))
    assert "Denied: notes.write on run #" in page and "with your note" in page
    result = results_by_call(approval.pk)["call_w"]
    assert result["status"] == "denied" and "not now" in result["content"]


def test_hitl4_a_double_submit_executes_once_and_the_second_says_why(approver, approval):
    ticket = active_ticket(approval.pk)
    client = signed_in(approver)
    data = form(ticket, decision="allow")
    post(client, ticket, data)
    second = text(post(client, ticket, data))
    assert WORDS["not_awaiting"] in second
    assert "It was approved by you at" in second
    assert len(decided_events(approval.pk)) == 1
    assert Ticket.objects.filter(run=approval).count() == 1


def ticket_edits(ticket: Ticket) -> dict[str, dict]:
    return {
        "correlation_mismatch": {"correlation_id": "00000000-0000-4000-8000-000000000000"},
        "run_mismatch": {"run": str(ticket.run_id + 1000)},
        "snapshot_mismatch": {"snapshot_id": "0" * 64},
        "catalog_mismatch": {"catalog_fingerprint": "f" * 64},
        "call_mismatch": {"call_id": "call_other"},
        "result_kind_mismatch": {"kind": "input"},
    }


@pytest.mark.parametrize(
    "code",
    [
        "correlation_mismatch",
        "run_mismatch",
        "snapshot_mismatch",
        "catalog_mismatch",
        "call_mismatch",
        "result_kind_mismatch",
    ],
)
def test_ui5_hitl3_an_edited_post_changes_nothing_and_says_why(approver, approval, code):
    ticket = active_ticket(approval.pk)
    before = picture(approval.pk)
    data = {**form(ticket, decision="allow"), **ticket_edits(ticket)[code]}
    page = text(post(signed_in(approver), ticket, data))
    assert WORDS[code] in page
    assert picture(approval.pk) == before
    assert f'data-ticket="{ticket.correlation_id}"' in page  # still there to decide


def test_hitl7_an_expired_ticket_refuses_the_post_in_words(approver, approval):
    ticket = active_ticket(approval.pk)
    Ticket.objects.filter(pk=ticket.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    before = picture(approval.pk)
    page = text(post(signed_in(approver), ticket, form(ticket, decision="allow")))
    assert WORDS["expired"] in page
    assert picture(approval.pk) == before


def test_hitl9_a_user_without_approve_run_is_not_permitted_in_words(initiator, approval):
    ticket = active_ticket(approval.pk)
    before = picture(approval.pk)
    page = text(post(signed_in(initiator), ticket, form(ticket, decision="allow")))
    assert WORDS["not_permitted"] in page
    assert picture(approval.pk) == before


def test_hitl8_the_initiator_sees_why_approve_is_not_theirs_and_may_not_press_it(approver):
    scripted_configuration("four", TURNS, require_second_approver=True)
    run = park(approver, "four")
    ticket = active_ticket(run.pk)
    client = signed_in(approver)
    html = client.get("/inbox/").content.decode()
    assert "you started this run, and its configuration needs a" in html
    assert re.search(r'value="allow"[^>]*disabled[^>]*>Approve</button>', html)
    before = picture(run.pk)
    page = text(post(client, ticket, form(ticket, decision="allow")))
    assert WORDS["self_approval"] in page
    assert picture(run.pk) == before
    # Deny stays theirs (HITL-8 never covers a deny).
    post(client, ticket, form(ticket, decision="deny"))
    assert results_by_call(run.pk)["call_w"]["status"] == "denied"


def test_a_post_without_a_decision_changes_nothing_and_says_so(approver, approval):
    ticket = active_ticket(approval.pk)
    before = picture(approval.pk)
    page = text(post(signed_in(approver), ticket, form(ticket)))
    assert "Press Approve or Deny." in page
    assert picture(approval.pk) == before


def test_ui5_a_post_without_csrf_is_refused_on_a_worded_page(approver, approval):
    ticket = active_ticket(approval.pk)
    before = picture(approval.pk)
    client = signed_in(approver, enforce_csrf_checks=True)
    response = client.post(
        f"/inbox/{ticket.correlation_id}/resume/", form(ticket, decision="allow")
    )
    assert response.status_code == 403
    assert WORDS["csrf_failed"] in text(response)
    assert b"/static/playground/app.css" in response.content  # the site's own styled page
    assert 'href="/inbox/">Back to the page you came from' in response.content.decode()
    assert picture(approval.pk) == before
    forged = {**form(ticket, decision="allow"), "next": "//evil.example/"}
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", forged)
    assert response.status_code == 403 and b"evil.example" not in response.content


def test_ui2_with_the_pages_csrf_token_the_plain_post_decides(approver, approval):
    ticket = active_ticket(approval.pk)
    client = signed_in(approver, enforce_csrf_checks=True)
    html = client.get("/inbox/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
    data = {**form(ticket, decision="allow"), "csrfmiddlewaretoken": token}
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert response.status_code == 302
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED


def test_a_next_url_off_site_is_not_followed(approver, approval):
    ticket = active_ticket(approval.pk)
    data = {**form(ticket, decision="deny"), "next": "https://evil.example/"}
    response = signed_in(approver).post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert response["Location"] == "/inbox/"


# --- typed input --------------------------------------------------------------------------


def test_hitl6_an_out_of_range_answer_shows_the_fields_error_and_keeps_what_was_typed(
    initiator, question
):
    ticket = active_ticket(question.pk)
    client = signed_in(initiator)
    before = picture(question.pk)
    data = form(ticket, **{"value.severity": "high", "value.hours": "99"})
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert response.status_code == 422
    html = response.content.decode()
    cid = ticket.correlation_id
    assert WORDS["invalid_input"] in unescape(html)
    assert re.search(
        rf'id="q-{cid}-value__hours" name="value\.hours" value="99".*?'
        rf'<ul class="errorlist" id="q-{cid}-value__hours-errors"><li>At most 72\.</li>',
        html,
        re.S,
    )
    assert '<option value="high" selected>high</option>' in html
    assert picture(question.pk) == before
    # Then a valid answer is accepted and becomes the call's result.
    data["value.hours"] = "12"
    page = text(post(client, ticket, data))
    assert "Answer sent: run #" in page
    content = results_by_call(question.pk)["call_q"]["content"]
    assert json.loads(content) == {"severity": "high", "hours": 12}
    assert Run.objects.get(pk=question.pk).status == Run.Status.QUEUED


def test_hitl6_a_missing_required_answer_is_shown_on_its_field(initiator, question):
    ticket = active_ticket(question.pk)
    response = signed_in(initiator).post(
        f"/inbox/{ticket.correlation_id}/resume/", form(ticket, **{"value.hours": "3"})
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert f'id="q-{ticket.correlation_id}-value__severity-errors"' in html
    assert "Required." in html


# --- live list ----------------------------------------------------------------------------


def test_ui2_the_polled_list_answers_204_until_it_changes(approver, approval, initiator):
    client = signed_in(approver)
    html = client.get("/inbox/").content.decode()
    signature = re.search(r'data-signature="([0-9a-f]+)"', html).group(1)
    assert client.get(f"/inbox/cards/?signature={signature}").status_code == 204
    # A new ticket appears: the poll now returns the list with both cards.
    scripted_configuration("second-cfg", TURNS)
    second = park(initiator, "second-cfg")
    fresh = client.get(f"/inbox/cards/?signature={signature}")
    assert fresh.status_code == 200
    body = fresh.content.decode()
    assert 'id="inbox-cards"' in body
    assert f'data-ticket="{active_ticket(second.pk).correlation_id}"' in body
    assert "<html" not in body  # a partial, not a page


def _statements_for_cards(client: Client) -> int:
    client.get("/inbox/cards/")  # the configurations cached for the catalog generation
    with CaptureQueriesContext(connection) as statements:
        assert client.get("/inbox/cards/").status_code == 200
    return len(statements.captured_queries)


def test_perf8_the_inbox_reads_its_cards_in_statements_that_do_not_grow_with_them(
    approver, approval, initiator
):
    """PERF-8: each card's readout (the configuration, its tools, the results its next send
    would withhold) comes from queries over every card at once, not a few per card."""
    client = signed_in(approver)
    one_card = _statements_for_cards(client)
    scripted_configuration("second-cfg", TURNS)
    for _ in range(4):
        park(initiator, "second-cfg")
    assert text(client.get("/inbox/cards/")).count("data-ticket=") == 5
    assert _statements_for_cards(client) == one_card


def test_ui2_a_decided_ticket_leaves_the_polled_list(approver, approval):
    ticket = active_ticket(approval.pk)
    client = signed_in(approver)
    html = client.get("/inbox/").content.decode()
    signature = re.search(r'data-signature="([0-9a-f]+)"', html).group(1)
    post(signed_in(approver), ticket, form(ticket, decision="allow"))
    body = client.get(f"/inbox/cards/?signature={signature}").content.decode()
    assert f'data-ticket="{ticket.correlation_id}"' not in body
    assert "Nothing is waiting for you." in body


def test_the_card_page_of_a_decided_ticket_says_who_decided(approver, approval):
    ticket = active_ticket(approval.pk)
    client = signed_in(approver)
    post(client, ticket, form(ticket, decision="deny"))
    page = text(client.get(f"/inbox/{ticket.correlation_id}/"))
    assert "This ticket is not waiting for you." in page
    assert "It was denied by you at" in page
    assert "hx-trigger" not in page.split('id="inbox-cards"')[1]  # the poll stops


def test_hitl9_the_initiator_opening_their_approvals_link_is_told_who_decides(initiator, approval):
    ticket = active_ticket(approval.pk)
    page = text(signed_in(initiator).get(f"/inbox/{ticket.correlation_id}/"))
    assert "This ticket is not waiting for you." in page
    assert "It waits for someone who may decide it: an approver" in page
    assert ">Approve</button>" not in page


@pytest.mark.django_db(transaction=True)
def test_hitl4_two_simultaneous_submits_execute_once(approver, initiator):
    """A double click sends two posts at once: the run row lock lets exactly one win."""
    scripted_configuration("race", TURNS)
    run = park(initiator, "race")
    ticket = active_ticket(run.pk)
    data = form(ticket, decision="allow")
    clients = [signed_in(approver), signed_in(approver)]
    pages = at_once(2, lambda: text(post(clients.pop(), ticket, data)))
    won = [page for page in pages if "Approved: notes.write" in page]
    refused = [page for page in pages if WORDS["not_awaiting"] in page]
    assert len(won) == 1 and len(refused) == 1
    assert len(decided_events(run.pk)) == 1
