"""The run page follows a run live without reload (UI-2, UI-3): waiting for an approval,
then, once approved elsewhere, its reply, the whole timeline and where the time went. The
runs list and the navigation's count are live too (UI-7, HITL-9)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from agentruns.bench.workload import allow_as_shown
from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Run, Ticket
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import run_resume
from agentruns.services.runs import Submission, run_submit
from tests.conftest import grant
from tests.support.runs import park


def test_ui2_the_run_page_shows_the_wait_then_the_reply_without_reload(
    transactional_db, cluster, page_as, staff, member, screenshot
):
    load_demo_data()
    run, _ = run_submit(user=member, submission=Submission("approval-demo", "Save the summary"))
    page = page_as(member)
    page.goto(f"/runs/{run.pk}/")
    page.evaluate("window.__sameDocument = true")
    expect(page.locator("[data-status]")).to_have_text("awaiting")
    ticket = Ticket.objects.get(run=run, status=Ticket.Status.ACTIVE)
    expect(page.get_by_role("link", name="Open it in the inbox")).to_have_attribute(
        "href", f"/inbox/{ticket.correlation_id}/"
    )
    expect(page.locator('[data-event="ticket.opened"]')).to_be_visible()
    screenshot(page, "run-page-awaiting")
    run_resume(
        user=grant(staff, "approve_run"),
        run_id=run.pk,
        command=allow_as_shown(ticket),
    )
    expect(page.locator("#final-reply")).to_have_text(
        "Done: I went on with what the approval request returned."
    )
    expect(page.locator("[data-status]")).to_have_text("completed")
    for kind in ("ticket.decided", "tool.result", "run.completed"):
        expect(page.locator(f'[data-event="{kind}"]')).to_have_count(1)
    assert page.evaluate("window.__sameDocument === true")
    # The wait for a person shows in the chart (the approval came after the page opened).
    label = page.get_by_role("img", name=re.compile("^Waiting for people")).get_attribute(
        "aria-label"
    )
    assert label and float(label.split(": ")[1].split(" seconds")[0]) > 0, label
    assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED
    page.get_by_text("Payload").last.click()
    screenshot(page, "run-page")


def test_hitl9_the_navigation_counts_a_new_ticket_without_reload(
    transactional_db, cluster, page_as, staff
):
    load_demo_data()
    approver = grant(staff, "approve_run")
    page = page_as(approver)
    page.goto("/runs/")
    page.evaluate("window.__sameDocument = true")
    badge = page.locator("#nav-inbox-count")
    expect(badge).to_have_text("0")
    run_submit(user=approver, submission=Submission("approval-demo", "Save it"))
    expect(badge).to_have_text("1")
    assert page.evaluate("window.__sameDocument === true")


def test_ui7_the_runs_list_shows_a_new_run_and_its_end_without_reload(
    transactional_db, page_as, staff, screenshot
):
    load_demo_data()
    page = page_as(staff)
    page.goto("/runs/")
    page.evaluate("window.__sameDocument = true")
    expect(page.get_by_text("No runs yet; new ones appear here by themselves.")).to_be_visible()
    run, _ = run_submit(user=staff, submission=Submission("multi-tool-demo", "From the API"))
    row = page.locator(f'[data-run="{run.pk}"]')
    expect(row).to_contain_text("queued")
    expect(row).to_contain_text(" UTC")  # UI-7: the time says its zone
    assert execute_run(run.pk) == Run.Status.COMPLETED
    expect(row).to_contain_text("completed")
    assert page.evaluate("window.__sameDocument === true")
    screenshot(page, "runs-live")


# Records every moment the nav's count and the number of cards disagree.
WATCH_AGREEMENT = """() => {
  window.__disagreed = [];
  const check = () => {
    const badge = document.getElementById("nav-inbox-count").textContent.trim();
    const cards = document.querySelectorAll("[data-ticket]").length;
    if (badge !== String(cards)) window.__disagreed.push([badge, cards]);
  };
  const all = {subtree: true, childList: true, characterData: true};
  new MutationObserver(check).observe(document.body, all);
}"""


def test_hitl9_ui7_on_the_inbox_the_count_and_the_cards_change_together(
    transactional_db, page_as, staff, member
):
    load_demo_data()
    approver = grant(staff, "approve_run")
    first = park(member, "approval-demo")
    page = page_as(approver)
    page.goto("/inbox/")
    expect(page.locator("[data-ticket]")).to_have_count(1)
    page.evaluate(WATCH_AGREEMENT)
    second = park(member, "approval-demo")
    expect(page.locator("[data-ticket]")).to_have_count(2)
    expect(page.locator("#nav-inbox-count")).to_have_text("2")
    for run in (first, second):
        run_resume(user=approver, run_id=run.pk, command=allow_as_shown(run.tickets.get()))
    expect(page.locator("[data-ticket]")).to_have_count(0)
    expect(page.locator("#nav-inbox-count")).to_have_text("0")
    assert page.evaluate("window.__disagreed") == []


def test_ui7_start_a_run_brings_the_chosen_configurations_example_task(
    transactional_db, page_as, member
):
    """As on the playground: a change of configuration brings its example task over htmx,
    and a task the member typed stays."""
    load_demo_data()
    page = page_as(member)
    page.goto("/runs/")
    task = page.get_by_label("Task", exact=True)
    expect(task).to_be_visible()  # not folded away
    page.get_by_label("Configuration").first.select_option("approval-demo")
    approval = Configuration.objects.get(slug="approval-demo").example_task
    expect(task).to_have_value(approval)
    task.fill("Check the backups")
    page.get_by_label("Configuration").first.select_option("helpdesk")
    expect(task).to_have_value("Check the backups")
