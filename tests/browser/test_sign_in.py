"""UI-4 in a real browser: a new user lands on the sign-in page, signs in with the demo
account shown there, and reaches the home page with its links."""

from __future__ import annotations

from playwright.sync_api import expect

from agentruns.demo import load_demo_data, load_demo_users
from agentruns.demo_accounts import DEMO_PASSWORD


def test_ui4_a_new_user_signs_in_with_the_demo_account_and_sees_the_home_page(
    anonymous_page, screenshot
):
    load_demo_data()
    load_demo_users()
    page = anonymous_page
    page.goto("/")
    expect(page).to_have_url("/accounts/login/?next=/")
    expect(page.get_by_role("table")).to_contain_text("member")
    screenshot(page, "sign-in")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(DEMO_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Run LLM agents safely")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    for name in ("Home", "Playground", "Runs", "Admin"):
        expect(nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="Inbox")).to_contain_text("0")
    screenshot(page, "home")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_the_cluster_executes_what_the_live_server_submitted(cluster, page_as, staff):
    """The harness itself: a run submitted in the test database is executed by the
    running cluster, and a signed-in session sees its page."""
    from agentruns.models import Run
    from agentruns.services.runs import Submission, run_submit

    load_demo_data()
    run, _ = run_submit(user=staff, submission=Submission("multi-tool-demo", "Standup note"))
    cluster.wait(
        lambda: Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED,
        timeout=60,
        what="the demo run to complete",
    )
    page = page_as(staff)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator(".status")).to_have_text("completed")
