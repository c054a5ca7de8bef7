"""The playground as a user clicks it (FS-3, FS-5, CG-7, CG-10, UI-2, UI-3, UI-6), in
Chromium against the live server and a running cluster."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Run, Snippet
from tests.support.catalog import openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.runs import park


@pytest.fixture
def demo(transactional_db):
    load_demo_data()


def mark_page(page: Page) -> None:
    """A marker that a reload would wipe: its survival proves the page updated in place."""
    page.evaluate("window.__sameDocument = true")


def still_same_document(page: Page) -> bool:
    return page.evaluate("window.__sameDocument === true")


def test_ui2_ui7_the_first_click_runs_offline_and_shows_tool_calls_and_reply_without_reload(
    demo, cluster, page_as, staff, screenshot
):
    """UI-7: nothing chosen, nothing typed: the preselected configuration and task run."""
    page = page_as(staff)
    page.goto("/playground/")
    select = page.get_by_label("Configuration")
    expect(select).to_have_value("multi-tool-demo")
    expect(select.locator("option", has_text="anthropic-assistant")).to_have_text(
        re.compile(r"· needs ANTHROPIC_API_KEY$")
    )
    expect(page.get_by_label("Task")).to_have_value("Write the standup note")
    expect(page.locator("#readout [data-configuration]")).to_contain_text("multi-tool-demo")
    screenshot(page, "playground")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/playground/runs/\d+/$"))
    mark_page(page)
    expect(page.locator("#final-reply")).to_have_text("Saved the standup note.")
    write = page.locator("[data-call]").filter(has_text="notes.write")
    expect(write).to_contain_text("Deploy at 14:00.")
    expect(write).to_contain_text("Saved note")
    expect(write.locator(".status")).to_have_text("ok")
    expect(page.locator("[data-status]")).to_have_text("completed")
    assert still_same_document(page)
    second = page.locator("[data-turn]").nth(1)
    second.locator("summary").first.click()  # what the second turn was sent
    expect(second).to_contain_text("No note titled 'Standup'.")
    screenshot(page, "playground-inspector")


@pytest.fixture
def fake(transactional_db):
    with FakeProvider() as server:
        yield server


def desk(fake: FakeProvider, slug: str, zone: str, snippet: str, data_class: str, text: str):
    """A configuration on the fake provider, and a snippet to force into it."""
    openai_configuration(slug, fake, zone=zone, name=slug.replace("-", " ").title())
    Snippet.objects.create(slug=snippet, name=snippet.title(), data_class=data_class, text=text)


def fill(page: Page, configuration: str, task: str, snippet: str) -> None:
    page.goto("/playground/")
    page.get_by_label("Configuration").select_option(configuration)
    page.get_by_label("Task").fill(task)
    page.get_by_placeholder("Search snippets…").fill(snippet[:5])
    page.get_by_label(re.compile(snippet)).check()
    expect(page.locator("#readout")).to_contain_text(snippet)


def test_cg7_a_forced_secret_snippet_is_refused_with_slug_class_and_remedies_and_nothing_sent(
    fake, cluster, page_as, staff, screenshot
):
    desk(fake, "global-desk", "external_global", "merger-plans", "secret", "Project Falcon.")
    page = page_as(staff)
    fill(page, "global-desk", "Summarise the plans", "merger-plans")
    readout = page.locator("#readout")
    expect(readout).to_contain_text("refused")
    expect(readout).to_contain_text("forced")
    screenshot(page, "playground-refusal-readout")
    page.get_by_role("button", name="Run", exact=True).click()
    failure = page.locator("#failure")
    expect(failure).to_contain_text("The context gate refused this run")
    for words in ("merger-plans", "secret", "raise the provider", "correct its data class"):
        expect(failure).to_contain_text(words)
    expect(page.locator("body")).not_to_contain_text("Project Falcon")
    expect(page.locator("[data-status]")).to_have_text("failed")
    screenshot(page, "playground-refused-run")
    assert fake.requests == []


def test_fs3_a_dry_run_shows_a_snippets_text_and_sends_nothing(
    fake, live_server, page_as, staff, screenshot
):
    desk(fake, "local-desk", "local", "house-style", "public", "Answer briefly.")
    page = page_as(staff)
    fill(page, "local-desk", "hello there", "house-style")
    page.get_by_role("button", name="Dry run").click()
    dry = page.locator("#dry-run")
    expect(dry).to_contain_text("Dry run: nothing was sent")
    expect(dry).to_contain_text("Answer briefly.")
    expect(dry).to_contain_text("hello there")
    screenshot(page, "playground-dry-run")
    assert fake.requests == []
    assert not Run.objects.exists()


def test_fs5_sec2_a_plain_user_gets_no_playground_and_sees_no_one_elses_runs(
    demo, live_server, page_as, member, staff, screenshot
):
    from agentruns.services.runs import Submission, run_submit

    theirs, _ = run_submit(user=staff, submission=Submission("helpdesk", "staff's secret task"))
    mine, _ = run_submit(user=member, submission=Submission("helpdesk", "my own task"))
    page = page_as(member)
    page.goto("/")
    expect(
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Playground")
    ).to_have_count(0)
    response = page.goto("/playground/")
    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="Not permitted")).to_be_visible()
    page.goto("/runs/")
    expect(page.locator(f'[data-run="{mine.pk}"]')).to_be_visible()
    expect(page.locator(f'[data-run="{theirs.pk}"]')).to_have_count(0)
    expect(page.locator("body")).not_to_contain_text("staff's secret task")
    screenshot(page, "runs-plain-user")
    response = page.goto(f"/runs/{theirs.pk}/")
    assert response is not None and response.status == 404


def test_ui2_the_playground_works_with_javascript_off(demo, cluster, page_as, staff, screenshot):
    page = page_as(staff, javascript=False)
    page.goto("/playground/")
    page.get_by_label("Configuration").select_option("multi-tool-demo")
    page.get_by_label(re.compile("changelog")).check()
    # No htmx: the readout is refreshed by posting the same form (UI-7: a POST, so the
    # CSRF token never lands in the address bar or a server log).
    page.get_by_role("button", name="Update readout").click()
    assert "csrfmiddlewaretoken" not in page.url and "?" not in page.url
    expect(page.locator("#readout [data-configuration]")).to_contain_text("multi-tool-demo")
    expect(page.locator("#readout")).to_contain_text("forced")
    expect(page.get_by_label(re.compile("changelog"))).to_be_checked()
    page.get_by_label("Task").fill("Standup without scripts")
    screenshot(page, "playground-no-javascript")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/playground/runs/\d+/$"))
    run = Run.objects.get()
    cluster.wait(
        lambda: Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED,
        timeout=60,
        what="the run to complete",
    )
    page.reload()
    expect(page.locator("#final-reply")).to_have_text("Saved the standup note.")


@pytest.mark.parametrize("javascript", [True, False])
def test_ui7_a_waiting_runs_inspector_says_what_it_waits_for_and_how_it_updates(
    demo, page_as, staff, javascript
):
    """ "Filling in live" only where the page polls; without scripts, "reload to update"."""
    question = park(staff, "question-demo")
    approval = park(staff, "approval-demo")
    page = page_as(staff, javascript=javascript)
    page.goto(f"/playground/runs/{question.pk}/")
    calls = page.locator("[data-call]")
    expect(calls).to_contain_text("Waiting for an answer")
    expect(calls).not_to_contain_text("Waiting for approval")
    live, reload = page.get_by_text("· filling in live"), page.get_by_text("· reload to update")
    expect(live if javascript else reload).to_be_visible()
    expect(reload if javascript else live).to_be_hidden()
    page.goto(f"/runs/{approval.pk}/")
    live, reload = page.get_by_text("· updating live"), page.get_by_text("· reload to update")
    expect(live if javascript else reload).to_be_visible()
    expect(reload if javascript else live).to_be_hidden()
    page.goto(f"/playground/runs/{approval.pk}/")
    expect(page.locator("[data-call]")).to_contain_text("Waiting for approval")


def test_ui7_a_change_of_configuration_brings_its_example_task_unless_one_was_typed(
    demo, page_as, staff
):
    page = page_as(staff)
    page.goto("/playground/")
    task, select = page.get_by_label("Task"), page.get_by_label("Configuration")
    select.select_option("approval-demo")
    expect(task).to_have_value(Configuration.objects.get(slug="approval-demo").example_task)
    task.fill("Check the backups")
    select.select_option("helpdesk")
    expect(page.locator("#readout [data-configuration]")).to_contain_text("helpdesk")
    expect(task).to_have_value("Check the backups")
