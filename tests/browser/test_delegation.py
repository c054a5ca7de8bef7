"""DEL-5, DEL-7 in a browser: the run page shows delegate-demo's tree — the parent and its
two children, each with its status and a link — and follows it live as a real cluster
drives the children and an approver answers one of them elsewhere; without JavaScript the
same tree is there, and a reload brings the new statuses."""

from __future__ import annotations

from playwright.sync_api import expect

from agentruns.bench.workload import allow_as_shown
from agentruns.demo import load_demo_data
from agentruns.models import Run, Ticket
from agentruns.services.resume import run_resume
from agentruns.services.runs import Submission, run_submit
from tests.conftest import grant


def test_del5_the_run_page_follows_the_delegation_tree_live_and_without_javascript(
    transactional_db, cluster, page_as, staff, screenshot
):
    load_demo_data()
    approver = grant(staff, "approve_run")
    run, _ = run_submit(user=approver, submission=Submission("delegate-demo", "Triage payments"))
    page = page_as(approver)
    page.goto(f"/runs/{run.pk}/")
    page.evaluate("window.__sameDocument = true")
    tree = page.get_by_role("region", name="Delegation tree")
    expect(tree.locator("li")).to_have_count(3)  # the parent and its two children
    lookup, runbook = Run.objects.filter(parent=run).order_by("id")
    lookup_row = tree.locator(f'li[data-run="{lookup.pk}"]')
    runbook_row = tree.locator(f'li[data-run="{runbook.pk}"]')
    expect(runbook_row.locator(".status")).to_have_text("completed")
    expect(lookup_row.locator(".status")).to_have_text("awaiting")
    expect(tree.locator(f'li[data-run="{run.pk}"] > .status')).to_have_text("awaiting")
    expect(lookup_row.get_by_role("link", name=f"#{lookup.pk}")).to_have_attribute(
        "href", f"/runs/{lookup.pk}/"
    )
    # The runbook child ended at once: only the lookup child is waited for now.
    expect(page.get_by_text(f"Waiting for its child run #{lookup.pk} (")).to_be_visible()
    screenshot(page, "delegation-tree")

    still = page_as(approver, javascript=False)  # the same tree, served whole
    still.goto(f"/runs/{run.pk}/")
    still_tree = still.get_by_role("region", name="Delegation tree")
    expect(still_tree.locator(f'li[data-run="{lookup.pk}"] .status')).to_have_text("awaiting")

    ticket = Ticket.objects.get(run=lookup, status=Ticket.Status.ACTIVE)
    run_resume(user=approver, run_id=lookup.pk, command=allow_as_shown(ticket))
    expect(lookup_row.locator(".status")).to_have_text("completed")
    expect(tree.locator(f'li[data-run="{run.pk}"] > .status')).to_have_text("completed")
    expect(page.locator("#final-reply")).to_contain_text("Triage done")
    assert page.evaluate("window.__sameDocument === true")
    screenshot(page, "delegation-tree-done")

    expect(still_tree.locator(f'li[data-run="{lookup.pk}"] .status')).to_have_text("awaiting")
    still.reload()  # without JavaScript, a reload is how it updates
    expect(
        still.get_by_role("region", name="Delegation tree").locator(
            f'li[data-run="{lookup.pk}"] .status'
        )
    ).to_have_text("completed")
