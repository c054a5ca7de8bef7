"""FORK-2 in Chromium: "Fork from here" on a model turn of the inspector and of the run
page, with a configuration select and a new prompt; the fork opens, runs and links back;
the runs list shows it under its original. With scripts on and with scripts off."""

from __future__ import annotations

from playwright.sync_api import expect

from agentruns import events as ev
from agentruns.demo import load_demo_data
from agentruns.models import Event, Run
from agentruns.runtime.loop import execute_run
from tests.browser.conftest import SCREENSHOTS
from tests.support.runs import submit


def completed(user) -> Run:
    run = submit(user, "multi-tool-demo", "Write the standup note")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return run


def first_turn(run: Run) -> int:
    rows = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")
    return rows.values_list("sequence", flat=True)[0]


def test_fork2_fork_from_a_turn_in_the_inspector_then_find_it_under_its_original(
    transactional_db, page_as, staff, screenshot
):
    load_demo_data()
    original = completed(staff)
    at = first_turn(original)
    page = page_as(staff)
    page.goto(f"/playground/runs/{original.pk}/")
    form = page.get_by_role("form", name=f"Fork from event #{at}")
    page.locator(f"#fork-inspector-{at} > summary").click()
    expect(form.get_by_label("Configuration")).to_have_value("multi-tool-demo")
    form.get_by_label("New prompt (optional)").fill("Make it shorter.")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator('[data-turn="0"]').screenshot(path=str(SCREENSHOTS / "fork-from-here.png"))
    form.get_by_role("button", name="Fork").click()

    fork = Run.objects.get(forked_from=original)
    expect(page).to_have_url(f"/playground/runs/{fork.pk}/")
    expect(page.get_by_text(f"Run #{fork.pk} forked from run #{original.pk}.")).to_be_visible()
    expect(page.get_by_role("link", name=f"run #{original.pk}")).to_have_attribute(
        "href", f"/playground/runs/{original.pk}/"
    )
    assert execute_run(fork.pk) == Run.Status.COMPLETED
    expect(page.locator("[data-status]").first).to_have_text("completed")
    screenshot(page, "fork-inspector")

    page.goto("/runs/")
    row = page.locator(f'[data-run="{fork.pk}"]')
    expect(row).to_have_attribute("data-fork-of", str(original.pk))
    expect(row).to_contain_text(f"fork of #{original.pk} at event #{at}")
    rows = page.locator("tr[data-run]")
    expect(rows.nth(0)).to_have_attribute("data-run", str(original.pk))
    expect(rows.nth(1)).to_have_attribute("data-run", str(fork.pk))


def test_fork2_fork_from_the_run_page_without_javascript(transactional_db, page_as, staff):
    load_demo_data()
    original = completed(staff)
    at = first_turn(original)
    page = page_as(staff, javascript=False)
    page.goto(f"/runs/{original.pk}/")
    page.locator(f"#fork-run-{at} > summary").click()
    form = page.get_by_role("form", name=f"Fork from event #{at}")
    form.get_by_label("Configuration").select_option("multi-tool-demo")
    form.get_by_role("button", name="Fork").click()

    fork = Run.objects.get(forked_from=original)
    expect(page).to_have_url(f"/runs/{fork.pk}/")
    expect(page.get_by_text(f"at event #{at}.")).to_be_visible()
    assert fork.forked_at == at and fork.input == original.input
    assert execute_run(fork.pk) == Run.Status.COMPLETED
    page.reload()
    expect(page.locator("[data-status]")).to_have_text("completed")
    page.goto(f"/runs/{original.pk}/")
    expect(page.get_by_role("link", name=f"#{fork.pk}", exact=True)).to_be_visible()
