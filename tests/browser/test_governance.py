"""GOV-1, GOV-3 in a real browser without JavaScript: the demo's helpdesk history in the
admin with its diff, and the editor's held change approved on its inbox card."""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from agentruns.demo import load_demo_data, load_demo_governance, load_demo_users
from agentruns.models import ChangeRequest, Configuration


def test_gov1_gov3_the_demo_history_and_a_held_change_approved_in_the_inbox(
    transactional_db, page_as, screenshot
):
    load_demo_data()
    load_demo_users()
    load_demo_governance()
    admin = get_user_model().objects.get(username="admin")
    helpdesk = Configuration.objects.get(slug="helpdesk")
    page = page_as(admin, javascript=False)

    page.goto(f"/admin/agentruns/configuration/{helpdesk.pk}/history/")
    version = page.locator("[data-version='2']")
    expect(version).to_contain_text("Version 2 (in force)")
    expect(version).to_contain_text("max_tool_calls")
    screenshot(page, "admin-configuration-history")

    page.goto("/inbox/")
    card = page.locator("[data-change-request]")
    expect(card).to_contain_text("configuration helpdesk")
    expect(card).to_contain_text("eu-scripted")
    screenshot(page, "inbox-change-request")
    card.get_by_role("button", name="Approve").click()
    expect(page.locator("ul.messages")).to_contain_text(re.compile(r"Change request #\d+ approved"))
    helpdesk.refresh_from_db()
    assert helpdesk.provider.slug == "eu-scripted" and helpdesk.version == 3
    assert ChangeRequest.objects.get().status == "approved"
