"""UI-1, UI-7: the admin without rough edges: the product's name in its header, headings
and inline rows in words, allowed tools, exempt tools and modes edited with real widgets
(checkboxes of the registry, one row per mode) whose errors stand beside the field, and
one date format, with its zone, in the admin and on the pages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.utils import timezone

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Run
from agentruns.services.runs import Submission, run_submit
from agentruns.words import when

pytestmark = pytest.mark.django_db

DATETIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


@pytest.fixture
def operator(client, django_user_model):
    user = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(user)
    load_demo_data()
    return user


def change_url(slug: str) -> str:
    return f"/admin/agentruns/configuration/{Configuration.objects.get(slug=slug).pk}/change/"


def checkbox(page: str, name: str, value: str) -> str | None:
    """The checkbox input for `value` of field `name`, or None."""
    for tag in re.findall(r"<input[^>]*>", page):
        if 'type="checkbox"' in tag and f'name="{name}"' in tag and f'value="{value}"' in tag:
            return tag
    return None


def test_ui7_the_admin_is_headed_by_the_products_name(client, operator):
    page = client.get("/admin/").content.decode()
    assert '<div id="site-name"><a href="/admin/">agentruns</a></div>' in page
    assert "Django administration" not in page and "Django site admin" not in page
    assert "<title>Operations | agentruns admin</title>" in page


def test_ui7_inline_headings_and_rows_read_as_words(client, operator):
    page = client.get(change_url("incident-desk")).content.decode()
    assert "Fallbacks (one level deep, tried in order on retryable errors)" in page
    assert "errors)s" not in page.lower()
    assert "incident-desk: snippet incident-report" in page
    assert "incident-desk: skill forensics" in page
    assert "incident-desk: fallback helpdesk" in page
    assert not re.search(r"\d+ → (snippet|skill|fallback) \d+", page)


def test_ui7_allowed_and_exempt_tools_are_checkboxes_of_the_registry(client, operator):
    page = client.get(change_url("multi-tool-demo")).content.decode()
    # Groups and single tools; what the configuration grants is ticked.
    assert "checked" in (checkbox(page, "allowed_tools", "notes") or "")
    assert "checked" in (checkbox(page, "allowed_tools", "clock.now") or "")
    assert "checked" not in (checkbox(page, "allowed_tools", "http.get") or "missing")
    # Only write tools wait for approval, so only they can be exempted.
    assert "checked" in (checkbox(page, "approval_exempt_tools", "notes.write") or "")
    assert checkbox(page, "approval_exempt_tools", "notes.read") is None
    assert '<textarea name="allowed_tools"' not in page and '<textarea name="modes"' not in page


def test_ui7_modes_are_one_row_each_with_core_and_deferred_checkboxes(client, operator):
    page = client.get(change_url("deferred-demo")).content.decode()
    assert 'name="modes-0-name" value="agent"' in page
    assert 'name="modes-1-name" value="chat"' in page
    assert 'name="modes-2-name" value=""' in page  # a blank row to add a mode
    assert "checked" in (checkbox(page, "modes-0-tools", "clock.now") or "")
    assert "checked" in (checkbox(page, "modes-0-deferred", "http.get") or "")
    assert "checked" not in (checkbox(page, "modes-1-tools", "clock.now") or "missing")


def posted(configuration: Configuration, **changes: Any) -> dict[str, Any]:
    """The change form's fields as the page would post them, inlines left as they are."""
    data: dict[str, Any] = {
        "slug": configuration.slug,
        "name": configuration.name,
        "provider": configuration.provider_id or "",
        "model": configuration.model,
        "active": "on" if configuration.active else "",
        "system_prompt": configuration.system_prompt,
        "system_prompt_data_class": configuration.system_prompt_data_class,
        "allowed_tools": list(configuration.allowed_tools),
        "approval_exempt_tools": list(configuration.approval_exempt_tools),
        "modes-rows": "0",
        "max_tool_calls": configuration.max_tool_calls,
        "tool_timeout_seconds": configuration.tool_timeout_seconds,
        "context_budget_tokens": configuration.context_budget_tokens,
        "approval_timeout_seconds": configuration.approval_timeout_seconds,
        "approvals_required": configuration.approvals_required,
        "input_token_price": configuration.input_token_price,
        "output_token_price": configuration.output_token_price,
        "daily_token_limit": configuration.daily_token_limit or "",
        "script": "{}",
    }
    for prefix in ("configurationsnippet_set", "configurationskill_set", "fallback_links"):
        data.update({f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0"})
    data.update(changes)
    return {key: value for key, value in data.items() if value != ""}


def save_helpdesk(client, **changes: Any):
    """The helpdesk's change form posted with `changes` (field names as the page posts)."""
    helpdesk = Configuration.objects.get(slug="helpdesk")
    return client.post(change_url("helpdesk"), posted(helpdesk, **changes))


def test_ui7_ticked_boxes_and_mode_rows_save_the_json_the_api_stores(client, operator):
    response = save_helpdesk(
        client,
        allowed_tools=["notes", "clock.now"],
        approval_exempt_tools=["notes.write"],
        **{
            "modes-rows": "3",
            "modes-0-name": "agent",
            "modes-0-tools": ["clock.now", "notes.read"],
            "modes-0-deferred": ["notes.write"],
            "modes-1-name": "chat",
            "modes-2-name": "",  # the spare row, left blank: no mode
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    helpdesk = Configuration.objects.get(slug="helpdesk")
    assert helpdesk.allowed_tools == ["notes", "clock.now"]
    assert helpdesk.approval_exempt_tools == ["notes.write"]
    assert helpdesk.modes == [
        {"name": "agent", "tools": ["clock.now", "notes.read"], "deferred": ["notes.write"]},
        {"name": "chat", "tools": [], "deferred": []},
    ]
    # Unchanged on the next save: the editor shows exactly what is stored.
    page = client.get(change_url("helpdesk")).content.decode()
    assert "checked" in (checkbox(page, "modes-0-deferred", "notes.write") or "")


def test_ui7_a_mode_error_stands_beside_the_field_and_nothing_is_saved(client, operator):
    response = save_helpdesk(
        client,
        **{
            "modes-rows": "2",
            "modes-0-name": "",
            "modes-0-tools": ["clock.now"],
            "modes-1-name": "chat",
            "modes-1-tools": ["notes.read"],
            "modes-1-deferred": ["notes.read"],
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    start = re.search(r'<div class="form-row errors field-modes">', page)
    assert start, "the modes row is not marked as having errors"
    row = page[start.start() :]
    row = row[: row.index('<div class="form-row', 20)]
    assert "Row 1 lists tools but has no name." in row
    assert "Mode &#x27;chat&#x27;: notes.read cannot be core and deferred." in row
    assert 'name="modes-1-name" value="chat"' in row  # what was typed is kept
    assert Configuration.objects.get(slug="helpdesk").modes == []


def test_ui7_a_name_the_registry_does_not_know_is_shown_and_kept(client, operator):
    helpdesk = Configuration.objects.get(slug="helpdesk")
    helpdesk.allowed_tools = ["notes", "legacy.lookup"]
    helpdesk.save()
    page = client.get(change_url("helpdesk")).content.decode()
    tag = checkbox(page, "allowed_tools", "legacy.lookup")
    assert tag is not None and "checked" in tag
    assert "legacy.lookup (not a registered tool or group)" in page
    response = client.post(change_url("helpdesk"), posted(helpdesk))
    assert response.status_code == 302
    helpdesk.refresh_from_db()
    assert helpdesk.allowed_tools == ["notes", "legacy.lookup"]


def test_ui7_one_date_format_with_its_zone_in_the_admin_and_on_the_pages(client, operator):
    run, _ = run_submit(user=operator, submission=Submission("multi-tool-demo", "go"))
    shown = when(run.created_at)
    assert re.fullmatch(DATETIME, shown), shown
    assert shown == timezone.localtime(run.created_at).strftime("%Y-%m-%d %H:%M:%S UTC")
    admin_list = client.get("/admin/agentruns/run/").content.decode()
    admin_page = client.get(f"/admin/agentruns/run/{run.pk}/change/").content.decode()
    runs_list = client.get("/runs/").content.decode()
    run_page = client.get(f"/runs/{run.pk}/").content.decode()
    for page in (admin_list, admin_page, runs_list, run_page):
        assert shown in page
        assert not re.search(r"[A-Z][a-z]{2}\. \d+, \d{4}, \d+:\d\d [ap]\.m\.", page)
    assert Run.objects.count() == 1
