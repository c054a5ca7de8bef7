"""UI-6: the playground's snippet search in Chromium. Typing hides the snippets that do not
match (their `display` must not override `hidden`); Enter in the box filters and never
submits the form, which would start a real run. Without scripts the box cannot filter, so
it is not shown and there is nothing to press Enter in."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from agentruns.demo import load_demo_data
from agentruns.models import Run


@pytest.fixture
def demo(transactional_db):
    load_demo_data()


@pytest.mark.parametrize("javascript", [True, False], ids=["scripts-on", "scripts-off"])
def test_ui6_the_snippet_search_hides_what_does_not_match_and_enter_starts_no_run(
    demo, page_as, staff, javascript
):
    page = page_as(staff, javascript=javascript)
    page.goto("/playground/")
    search = page.get_by_role("searchbox", name="Search snippets")
    merger, changelog = (page.get_by_label(re.compile(slug)) for slug in ("merger", "changelog"))
    if javascript:
        search.fill("merger")
        expect(merger).to_be_visible()
        expect(changelog).to_be_hidden()
        search.press("Enter")
        expect(search).to_have_value("merger")  # still the same page, still filtered
        expect(changelog).to_be_hidden()
    else:
        expect(search).to_be_hidden()
        expect(changelog).to_be_visible()
    expect(page).to_have_url(re.compile(r"/playground/$"))
    assert not Run.objects.exists()
