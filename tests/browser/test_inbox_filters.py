"""The inbox for a team in Debian's Chromium (HITL-15, UI-2): a person filters the inbox
by configuration and kind with the page's GET form; the filter lands in the URL, the
cards and counts follow it, and the live poll keeps it: a new ticket under the filter
appears by itself, one outside it does not. With JavaScript off the same form works."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket
from tests.support.routing import ASK_TURNS, WRITE_TURNS, person
from tests.support.runs import park

LIVE = 20_000  # the cards poll every 2 s; allow for a loaded machine


@pytest.fixture
def approver(transactional_db):
    return person("ada")


def cards(page):
    return page.locator("[data-ticket]")


def test_hitl15_filtering_the_inbox_keeps_the_filter_in_the_url_and_the_poll(
    page_as, screenshot, approver, member
):
    for slug in ("billing", "support"):
        scripted_configuration(slug, WRITE_TURNS)
    scripted_configuration("survey", ASK_TURNS)
    for slug in ("billing", "billing", "support", "survey"):
        park(member, slug)
    page = page_as(approver)
    page.goto("/inbox/")
    expect(cards(page)).to_have_count(4)
    page.get_by_label("Configuration").select_option("billing")
    page.get_by_role("radio", name=re.compile("Approvals")).check()
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/inbox/\?configuration=billing&kind=approval$"))
    expect(cards(page)).to_have_count(2)
    expect(page.get_by_role("status").filter(has_text="Showing")).to_contain_text(
        "Showing 2 tickets under this filter."
    )
    outside = active_ticket(park(member, "support").pk)
    inside = active_ticket(park(member, "billing").pk)
    expect(page.locator(f'[data-ticket="{inside.correlation_id}"]')).to_be_visible(timeout=LIVE)
    expect(page.locator(f'[data-ticket="{outside.correlation_id}"]')).to_have_count(0)
    expect(cards(page)).to_have_count(3)
    expect(page.locator(".shown")).to_have_text("Showing 3 tickets under this filter.")
    expect(cards(page).first.locator(".access")).to_have_text("You are an approver")
    # The swap put every preserved control back into its card (UI-2): none is left over.
    expect(page.locator("#--htmx-preserve-pantry--")).to_have_count(0)
    expect(page.locator("#inbox-cards ~ * textarea, footer ~ *")).to_have_count(0)
    screenshot(page, "inbox-filtered")


def test_hitl15_the_filters_work_with_javascript_off(page_as, approver, member):
    scripted_configuration("billing", WRITE_TURNS)
    scripted_configuration("survey", ASK_TURNS)
    park(member, "billing")
    park(member, "survey")
    page = page_as(approver, javascript=False)
    page.goto("/inbox/")
    page.get_by_role("radio", name=re.compile("Questions")).check()
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/inbox/\?configuration=&kind=question$"))
    expect(cards(page)).to_have_count(1)
    expect(page.get_by_role("link", name="Clear filters")).to_be_visible()
    page.get_by_role("link", name="Clear filters").click()
    expect(cards(page)).to_have_count(2)
