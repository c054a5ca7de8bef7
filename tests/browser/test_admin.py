"""The configuration admin starts a forced-source run through the same services as the
playground (FS-1, FS-5), and the inspector follows it live."""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from agentruns.demo import (
    load_demo_data,
    load_demo_governance,
    load_demo_schedules,
    load_demo_users,
)
from agentruns.models import (
    Configuration,
    GateAudit,
    Run,
    Schedule,
    Snippet,
    Ticket,
    ToolInvocation,
    Trigger,
    TriggerFiring,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from tests.support.runs import park, prompt


def test_a_forced_source_run_started_from_the_configuration_admin(
    transactional_db, cluster, page_as, django_user_model, screenshot
):
    load_demo_data()
    root = django_user_model.objects.create_superuser("root", password="pw")
    config = Configuration.objects.get(slug="multi-tool-demo")
    changelog = Snippet.objects.get(slug="changelog")
    page = page_as(root)
    page.goto(f"/admin/agentruns/configuration/{config.pk}/change/")
    expect(page.get_by_role("link", name="Try in playground")).to_have_attribute(
        "href", "/playground/?configuration=multi-tool-demo"
    )
    page.get_by_role("link", name="Run with forced sources").click()
    page.get_by_label("Task").fill("Standup, with the changelog")
    page.get_by_label(re.compile("changelog")).check()
    screenshot(page, "admin-run-with-forced-sources")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/playground/runs/\d+/$"))
    expect(page.locator("#final-reply")).to_have_text("Saved the standup note.")
    run = Run.objects.get()
    assert run.forced_snippet_ids == [changelog.pk] and run.created_by == root
    page.get_by_text(re.compile(r"System texts every turn carries")).click()
    expect(page.locator("#inspector-live")).to_contain_text("v2.3 adds bulk export.")


def test_ui7_tools_and_modes_are_edited_with_checkboxes_and_rows_without_javascript(
    transactional_db, page_as, django_user_model, screenshot
):
    load_demo_data()
    root = django_user_model.objects.create_superuser("root", password="pw")
    config = Configuration.objects.get(slug="deferred-demo")
    page = page_as(root, javascript=False)
    page.goto(f"/admin/agentruns/configuration/{config.pk}/change/")
    expect(page.locator("#site-name")).to_have_text("agentruns")
    notes = page.get_by_role("checkbox", name=re.compile(r"^notes — every tool in it"))
    expect(notes).to_be_checked()
    third = page.get_by_role("group", name="Mode 3", exact=True)
    third.get_by_label("Name:").fill("review")
    third.get_by_role("group", name="Core tools of mode 3").get_by_label("notes.read").check()
    screenshot(page, "admin-configuration-tools")
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    config.refresh_from_db()
    assert config.modes[-1] == {"name": "review", "tools": ["notes.read"], "deferred": []}
    assert [mode["name"] for mode in config.modes] == ["agent", "chat", "review"]


WIDE_CHANGELISTS = [
    "triggerfiring",
    "schedule",
    "changerequest",
    "run",
    "gateaudit",
    "ticket",
    "toolinvocation",
    "auditrecord",
    "mcpserver",
    "provider",
    "webhookdelivery",
    "webhookattempt",
]


def test_ui7_the_admins_tables_and_the_configurations_name_fit_1280_pixels(
    transactional_db, page_as
):
    load_demo_data()
    load_demo_users()
    load_demo_schedules()
    load_demo_governance()
    admin = get_user_model().objects.get(username="admin")
    trigger = Trigger.objects.get(slug="demo-alert")
    TriggerFiring.objects.create(
        trigger=trigger,
        signature="23658a2d6effbac48cfb19707acf58179c62cdb10964a82f533126b2dd0a8d49",
        signed_at=trigger.created_at,
        run=park(admin, "approval-demo", "Alert: disk full on db-1"),
    )
    # Rows as runs write them: gate audits, a parked run's ticket, tool invocations.
    standup = prompt(admin, "multi-tool-demo", "Write the standup note")
    mcp_demo_records(standup, admin)
    webhook_records(standup, admin)
    morning = Schedule.objects.get(name="morning-report")
    morning.active = True  # so its list shows a next run's date (no cluster starts it)
    morning.save()
    page = page_as(admin)
    overflows = {}
    for model in WIDE_CHANGELISTS:
        page.goto(f"/admin/agentruns/{model}/")
        expect(page.locator("#result_list tbody tr").first).to_be_visible()
        results = page.locator("#changelist-form .results")
        overflows[model] = results.evaluate("e => e.scrollWidth - e.clientWidth")
    wider = {model: px for model, px in overflows.items() if px > 0}
    assert not wider, f"tables wider than their box, in px: {wider}"
    incident = Configuration.objects.get(slug="incident-desk")
    page.goto(f"/admin/agentruns/configuration/{incident.pk}/change/")
    name = page.locator("#id_name")
    expect(name).to_have_value("Incident desk (EU provider, global fallback)")
    assert name.evaluate("e => e.scrollWidth <= e.clientWidth"), "the name is cut"


def mcp_demo_records(run: Run, user: User) -> None:
    """The longest values `make run`'s MCP demo writes (MCP-4, MCP-5), on `run`: a result
    withheld from a global zone, a hosted model's call id, an approval of an MCP tool."""
    GateAudit.objects.create(
        verdict="refused",
        enforcement="observed",
        configuration="mcp-demo-global",
        run_id=run.pk,
        zone="external_global",
        ceiling="confidential",
        source_kind="tool_result",
        source_name="tracker.customer_lookup",
        data_class="restricted",
    )
    ToolInvocation.objects.create(
        run=run,
        turn_index=12,
        call_id="toolu_01A09q90qw90lq917835lq9",
        tool="tracker.customer_lookup",
        tool_version="1",
        arguments_digest="0" * 64,
        idempotency_key="1" * 64,
        status=ToolInvocation.Status.COMPLETED,
        effect_sent_at=run.created_at,
        completed_at=run.created_at,
    )
    Ticket.objects.create(
        run=run,
        thread=run.thread,
        snapshot_id="2" * 64,
        catalog_fingerprint="3" * 64,
        deadline=run.created_at,
        kind=Ticket.Kind.TOOL_PERMISSION,
        call_id="toolu_01A09q90qw90lq917835lq9",
        tool="tracker.add_comment",
        status=Ticket.Status.ANSWERED,
        resolved_at=run.created_at,
        resolved_by=user,
    )


def webhook_records(run: Run, user: User) -> None:
    """A delivery that gave up on an unreachable receiver (OPS-4), and its last attempt."""
    webhook = Webhook.objects.create(
        url="https://hooks.example.com/agentruns/events/incoming",
        events=["ticket.created"],
        secret="s" * 32,
        created_by=user,
    )
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        event_type="ticket.created",
        run_id=run.pk,
        thread_id=run.thread_id,
        sequence=17,
        event_created_at=timezone.now(),
        status=WebhookDelivery.Status.FAILED,
        attempts=8,
        last_status_code=503,
        withheld=["tool_result"],
    )
    WebhookAttempt.objects.create(
        delivery=delivery,
        status_code=503,
        latency_ms=10023,
        error="HTTPSConnectionPool(host='hooks.example.com', port=443): Read timed out.",
    )
