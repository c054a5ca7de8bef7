"""Edit before approving (HITL-12) and quorum (HITL-13) in Debian's Chromium: runs parked
and executed by a real cluster, the edit typed into the form generated from the tool's
schema with JavaScript off, and a quorum card counting approvals as they arrive."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Note, Run, Ticket
from agentruns.services.runs import Submission, run_submit
from tests.conftest import grant

LIVE = 20_000  # other sessions follow by polling every 2 s on a loaded machine


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


def approver(django_user_model, name: str):
    return grant(django_user_model.objects.create_user(name, password="pw"), "approve_run")


def test_hitl12_edit_arguments_in_the_inbox_without_javascript_runs_the_edit(
    cluster, page_as, screenshot, member, django_user_model
):
    load_demo_data()
    ticket = parked(cluster, member, "approval-demo", "Save the incident summary")
    page = page_as(approver(django_user_model, "ada"), javascript=False)
    page.goto(f"/inbox/{ticket.correlation_id}/")
    card = card_of(page, ticket)
    card.get_by_text("Edit arguments").click()
    form = card.get_by_role("form", name="Changed arguments to approve")
    expect(form.get_by_label("title")).to_have_value("Incident")
    form.get_by_label("title").fill("Incident 4711")
    form.get_by_label("body").fill("Cache was stale; purged at 10:02.")
    form.get_by_label("Why you changed them").fill("Named the incident; added the purge time.")
    screenshot(page, "inbox-edit-arguments")
    form.get_by_label("title").fill("")  # required, at least one character: refused
    form.get_by_role("button", name="Approve with these arguments").click()
    expect(page.locator("main")).to_contain_text("do not fit the tool's schema")
    form = card_of(page, ticket).get_by_role("form", name="Changed arguments to approve")
    expect(form).to_contain_text("Required.")
    expect(form.get_by_label("body")).to_have_value("Cache was stale; purged at 10:02.")
    form.get_by_label("title").fill("Incident 4711")
    form.get_by_role("button", name="Approve with these arguments").click()
    expect(page.get_by_role("status").first).to_contain_text("with your edited arguments")
    completed(cluster, ticket.run_id)
    note = Note.objects.get(run_id=ticket.run_id)
    assert (note.title, note.body) == ("Incident 4711", "Cache was stale; purged at 10:02.")


def test_hitl13_a_quorum_card_counts_approvals_and_the_second_releases_the_call(
    cluster, page_as, screenshot, member, django_user_model
):
    load_demo_data()
    Configuration.objects.filter(slug="approval-demo").update(approvals_required=2)
    ticket = parked(cluster, member, "approval-demo", "Save the incident summary")
    ada, bob = approver(django_user_model, "ada"), approver(django_user_model, "bob")
    first, second = page_as(ada), page_as(bob)
    for page in (first, second):
        page.goto("/inbox/")
        expect(card_of(page, ticket)).to_contain_text("0 of 2 approvals")
    card_of(first, ticket).get_by_role("button", name="Approve", exact=True).click()
    expect(first.get_by_role("status").first).to_contain_text("Approval counted")
    expect(card_of(first, ticket)).to_contain_text("1 of 2 approvals: ada")
    expect(
        card_of(first, ticket).get_by_role("button", name="Approve", exact=True)
    ).to_be_disabled()
    second.reload()
    expect(card_of(second, ticket)).to_contain_text("1 of 2 approvals: ada", timeout=LIVE)
    screenshot(second, "inbox-quorum")
    card_of(second, ticket).get_by_role("button", name="Approve", exact=True).click()
    expect(second.get_by_role("status").first).to_contain_text("Approved: notes.write")
    completed(cluster, ticket.run_id)
    assert Note.objects.filter(run_id=ticket.run_id).count() == 1
