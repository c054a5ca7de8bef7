"""The approval inbox in Debian's Chromium, as people click (UI-2, UI-3, UI-5, UI-6,
HITL-5, HITL-6, HITL-8): runs executed by a real cluster, decisions posted from the page,
other open pages following without reload."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Run, Ticket
from agentruns.services.runs import Submission, run_submit
from tests.conftest import grant
from tests.support.catalog import KEY, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import tool_messages

REPLY = "Done: I went on with what the approval request returned."
# Other sessions follow by polling every 2 s while the cluster runs the run: allow for a
# loaded machine (the context's own default covers actions, not `expect`).
LIVE = 20_000


@pytest.fixture
def approver(django_user_model):
    user = django_user_model.objects.create_user("ada", password="pw", is_staff=True)
    return grant(user, "approve_run")


@pytest.fixture
def second_approver(django_user_model):
    return grant(django_user_model.objects.create_user("bob", password="pw"), "approve_run")


def parked(cluster: Any, user: Any, configuration: str, text: str) -> Ticket:
    run, _ = run_submit(user=user, submission=Submission(configuration, text))
    return cluster.wait(
        lambda: Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).first(),
        timeout=60,
        what=f"{configuration} to park with a ticket",
    )


def completed(cluster: Any, run_id: int) -> Run:
    return cluster.wait(
        lambda: Run.objects.filter(pk=run_id, status=Run.Status.COMPLETED).first(),
        timeout=60,
        what=f"run {run_id} to complete",
    )


def card_of(page: Page, ticket: Ticket):
    return page.locator(f'[data-ticket="{ticket.correlation_id}"]')


def test_ui2_an_approval_reaches_the_open_run_page_and_leaves_every_inbox(
    cluster, page_as, screenshot, member, approver, second_approver
):
    load_demo_data()
    ticket = parked(cluster, member, "approval-demo", "Save the incident summary")
    run_page = page_as(member)
    run_page.goto(f"/runs/{ticket.run_id}/")
    mine, theirs = page_as(approver), page_as(second_approver)
    for inbox in (mine, theirs):
        inbox.goto("/inbox/")
        expect(card_of(inbox, ticket)).to_be_visible()
    card = card_of(mine, ticket)
    expect(card).to_contain_text("notes.write")
    expect(card).to_contain_text(ticket.arguments_digest)
    expect(card.locator("[data-countdown-left]")).to_contain_text("left")
    card.get_by_label("Note").fill("Checked the summary.")
    screenshot(mine, "inbox-approval")
    card.get_by_role("button", name="Approve").click()
    expect(mine.get_by_role("status").first).to_contain_text("Approved: notes.write")
    expect(card_of(mine, ticket)).to_have_count(0)
    # Nobody reloads the other pages.
    expect(card_of(theirs, ticket)).to_have_count(0, timeout=LIVE)
    expect(theirs.get_by_text("Nothing is waiting for you.")).to_be_visible()
    expect(run_page.locator("#final-reply")).to_have_text(REPLY, timeout=LIVE)
    screenshot(run_page, "inbox-approved-run-page")


def test_ui2_a_new_ticket_appears_without_reload_and_keeps_what_is_typed_elsewhere(
    cluster, page_as, member, approver
):
    load_demo_data()
    first = parked(cluster, member, "approval-demo", "First")
    page = page_as(approver)
    page.goto("/inbox/")
    card_of(page, first).get_by_label("Note").fill("half-written note")
    second = parked(cluster, member, "approval-demo", "Second")
    expect(card_of(page, second)).to_be_visible(timeout=LIVE)
    expect(card_of(page, first).get_by_label("Note")).to_have_value("half-written note")


def test_hitl5_a_deny_with_a_note_is_the_result_the_model_receives(
    cluster, page_as, screenshot, member, approver
):
    calls = [{"id": "call_w", "name": "notes_write", "arguments": {"title": "t", "body": "b"}}]

    def reply(body: dict, path: str) -> dict:
        if tool_messages(body):
            return {"text": "Understood, not saved."}
        return {"text": "", "tool_calls": calls}

    with FakeProvider(api_key=KEY, default=reply) as fake:
        openai_configuration("deny-wire", fake, allowed_tools=["notes"])
        ticket = parked(cluster, member, "deny-wire", "Save it")
        page = page_as(approver)
        page.goto(f"/inbox/{ticket.correlation_id}/")
        card = card_of(page, ticket)
        card.get_by_label("Note").fill("Not with customer data in it.")
        card.get_by_role("button", name="Deny").click()
        expect(page.get_by_role("status").first).to_contain_text("Denied: notes.write on run #")
        completed(cluster, ticket.run_id)
        [answered] = tool_messages(fake.requests[-1].body)
    assert answered["tool_call_id"] == "call_w"
    assert "Denied by approver ada: Not with customer data in it." in answered["content"]
    screenshot(page, "inbox-denied")


def test_hitl6_a_question_refuses_an_out_of_range_value_then_takes_a_valid_one(
    cluster, page_as, screenshot, member
):
    load_demo_data()
    ticket = parked(cluster, member, "question-demo", "Triage the outage")
    page = page_as(member)
    page.goto("/inbox/")
    card = card_of(page, ticket)
    expect(card).to_contain_text("How severe is the incident?")
    card.get_by_label("severity").select_option("high")
    card.get_by_label("hours").fill("99")
    card.get_by_role("button", name="Answer").click()
    card = card_of(page, ticket)
    hours = card.get_by_label("hours")
    expect(hours).to_have_value("99")
    expect(hours).to_have_attribute("aria-invalid", "true")
    expect(card.locator(".has-error .errorlist")).to_have_text("At most 72.")
    expect(card.get_by_label("severity")).to_have_value("high")
    screenshot(page, "inbox-question-error")
    hours.fill("12")
    card.get_by_role("button", name="Answer").click()
    expect(page.get_by_role("status").first).to_contain_text("Answer sent")
    run = completed(cluster, ticket.run_id)
    assert run.final_reply == "Thanks, I recorded the severity."
    ticket.refresh_from_db()
    assert ticket.resolution["value"] == {"severity": "high", "hours": 12}


def test_ui2_the_inbox_works_with_javascript_off(cluster, page_as, screenshot, member, approver):
    load_demo_data()
    ticket = parked(cluster, member, "approval-demo", "Save it, no scripts")
    page = page_as(approver, javascript=False)
    stale = page_as(approver, javascript=False)
    page.goto("/inbox/")
    stale.goto(f"/inbox/{ticket.correlation_id}/")
    card = card_of(page, ticket)
    expect(card.locator("[data-countdown-left]")).to_have_text("")  # no script ran
    expect(card).to_contain_text("UTC")  # the server-rendered deadline
    screenshot(page, "inbox-no-javascript")
    card.get_by_label("Note").fill("fine")
    card.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status").first).to_contain_text("Approved: notes.write")
    expect(card_of(page, ticket)).to_have_count(0)
    # The other tab still shows the old form: its post changes nothing and says why.
    card_of(stale, ticket).get_by_role("button", name="Approve").click()
    expect(stale.get_by_role("status").first).to_contain_text(
        "Nothing was changed: the run is no longer waiting"
    )
    expect(stale.get_by_role("status").first).to_contain_text("It was approved by you at")
    screenshot(stale, "inbox-stale-post")
    assert Ticket.objects.filter(run_id=ticket.run_id).count() == 1


def test_hitl8_four_eyes_on_the_card_and_a_forged_post_refused(
    cluster, page_as, screenshot, approver, second_approver
):
    load_demo_data()
    Configuration.objects.filter(slug="approval-demo").update(require_second_approver=True)
    ticket = parked(cluster, approver, "approval-demo", "My own write")
    mine = page_as(approver)
    mine.goto("/inbox/")
    card = card_of(mine, ticket)
    expect(card.get_by_role("button", name="Approve")).to_be_disabled()
    expect(card).to_contain_text("you started this run, and its configuration needs a")
    screenshot(mine, "inbox-four-eyes")
    # A post that lost its CSRF token (as a forged one would) decides nothing.
    theirs = page_as(second_approver)
    theirs.goto("/inbox/")
    theirs.locator('[name="csrfmiddlewaretoken"]').evaluate_all(
        "els => els.forEach(e => e.remove())"
    )
    card_of(theirs, ticket).get_by_role("button", name="Approve").click()
    expect(theirs.get_by_role("alert")).to_contain_text("Nothing was decided")
    screenshot(theirs, "inbox-csrf-refused")
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.ACTIVE
    # The second approver's own Approve, from the page, is accepted.
    theirs.goto("/inbox/")
    card_of(theirs, ticket).get_by_role("button", name="Approve").click()
    expect(theirs.get_by_role("status").first).to_contain_text("Approved: notes.write")
    assert completed(cluster, ticket.run_id).final_reply == REPLY


def test_ui5_an_approval_and_a_cancel_from_the_admin(
    cluster, page_as, screenshot, member, approver
):
    load_demo_data()
    ticket = parked(cluster, member, "approval-demo", "Approve me in the admin")
    page = page_as(grant(approver, "view_ticket", "change_ticket", "view_run", "change_run"))
    page.goto(f"/admin/agentruns/ticket/{ticket.pk}/change/")
    page.get_by_label("Note").fill("From the admin.")
    screenshot(page, "admin-ticket-decision")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".messagelist")).to_contain_text("Approved: notes.write")
    completed(cluster, ticket.run_id)
    other = parked(cluster, member, "approval-demo", "Cancel me in the admin")
    page.goto(f"/admin/agentruns/run/{other.run_id}/change/")
    expect(page.get_by_role("link", name="View on site")).to_have_attribute(
        "href", f"/runs/{other.run_id}/"
    )
    screenshot(page, "admin-run-cancel")
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Run {other.run_id} cancelled")
    assert Run.objects.get(pk=other.run_id).status == Run.Status.CANCELLED
    other.refresh_from_db()
    assert other.status == Ticket.Status.VOID
