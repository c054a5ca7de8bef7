"""SEC-15: one authority for the catalog. Over the API, as in the admin, each catalog write
needs its model permission and reading needs `view_`; `is_staff` alone grants nothing."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from agentruns.models import (
    Configuration,
    McpServer,
    McpTool,
    Provider,
    Webhook,
    WebhookDelivery,
)
from agentruns.services.webhooks import webhook_deliver_due
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_snippet
from tests.support.ops import Receiver
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def bare_staff(django_user_model):
    """Staff with `approve_run` and no model permission: the admin refuses every catalog
    page to her."""
    user = django_user_model.objects.create_user("colleague", password="pw", is_staff=True)
    return grant(user, "approve_run")


def client_of(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def mcp_tool() -> McpTool:
    server = McpServer.objects.create(slug="pay", name="pay", url="https://mcp.example.com/")
    return McpTool.objects.create(server=server, name="transfer", version="v1", effect="write")


def test_staff_without_model_permissions_changes_nothing_in_the_catalog(bare_staff):
    """SEC-15: the writes the review made as a staff approver without permissions."""
    configuration = make_configuration("payments")
    Group.objects.create(name="finance")
    provider = Provider.objects.get(pk=configuration.provider_id)
    tool = mcp_tool()
    api = client_of(bare_staff)
    attempts = [
        api.patch(
            "/api/configurations/payments/",
            {"approver_groups": ["finance"], "approvals_required": 1},
            format="json",
        ),
        api.patch(f"/api/providers/{provider.slug}/", {"trust_zone": "local"}, format="json"),
        api.patch("/api/mcp-servers/pay/tools/transfer/", {"effect": "read_only"}, format="json"),
        api.post("/api/mcp-servers/pay/refresh/"),
        api.post("/api/snippets/", {"slug": "s", "name": "s", "text": "t"}, format="json"),
        api.post(
            "/api/webhooks/",
            {"url": "https://hooks.example.com/in", "secret": "s" * 16},
            format="json",
        ),
        api.delete("/api/configurations/payments/"),
    ]
    assert [response.status_code for response in attempts] == [403] * len(attempts)
    configuration.refresh_from_db()
    assert not configuration.approver_groups.exists()
    assert Provider.objects.get(pk=provider.pk).trust_zone == provider.trust_zone
    tool.refresh_from_db()
    assert tool.effect == "write"
    assert not Webhook.objects.exists()
    assert Configuration.objects.filter(slug="payments").exists()


def test_reading_snippet_text_needs_view_permission(bare_staff):
    """SEC-15: snippet and skill text is read with `view_`, as the admin shows it."""
    snippet = make_snippet("secret-snippet", text="the merger closes friday")
    api = client_of(bare_staff)
    refused = [api.get("/api/snippets/"), api.get(f"/api/snippets/{snippet.pk}/")]
    assert [r.status_code for r in refused] == [403, 403]
    assert "merger" not in b"".join(r.content for r in refused).decode()
    grant(bare_staff, "view_snippet")
    shown = client_of(bare_staff).get(f"/api/snippets/{snippet.pk}/")
    assert shown.status_code == 200
    assert shown.json()["text"] == "the merger closes friday"
    # Seeing is not changing.
    changed = client_of(bare_staff).patch(
        f"/api/snippets/{snippet.pk}/", {"text": "x"}, format="json"
    )
    assert changed.status_code == 403


def test_each_write_takes_the_permission_the_admin_takes(bare_staff):
    """SEC-15: `change_configuration` changes a configuration; the MCP tool's declaration
    needs `change_mcptool`, as the admin's tool page does, not the server's."""
    make_configuration("payments")
    tool = mcp_tool()
    grant(bare_staff, "view_configuration", "change_configuration", "change_mcpserver")
    api = client_of(bare_staff)
    patched = api.patch("/api/configurations/payments/", {"name": "Payments"}, format="json")
    assert patched.status_code == 200, patched.content
    assert api.get("/api/configurations/payments/readout/").status_code == 200
    declared = api.patch(
        "/api/mcp-servers/pay/tools/transfer/", {"effect": "read_only"}, format="json"
    )
    assert declared.status_code == 403
    grant(bare_staff, "change_mcptool")
    declared = client_of(bare_staff).patch(
        "/api/mcp-servers/pay/tools/transfer/", {"effect": "read_only"}, format="json"
    )
    assert declared.status_code == 200, declared.content
    tool.refresh_from_db()
    assert tool.effect == "read_only"


def test_a_webhook_delivers_only_events_of_runs_its_owner_may_see(django_user_model, settings):
    """SEC-15: a colleague who gets 404 on another's run registers a webhook for every
    event type; that run's events are recorded `withheld`, never sent, her own are sent."""
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    colleague = django_user_model.objects.create_user("colleague", is_staff=True)
    grant(colleague, "add_webhook")
    make_configuration("c")
    receiver = Receiver(statuses=[200])
    try:
        created = client_of(colleague).post(
            "/api/webhooks/", {"url": receiver.url, "secret": "s" * 16}, format="json"
        )
        assert created.status_code == 201, created.content
        assert Webhook.objects.get().created_by == colleague
        initiator = django_user_model.objects.create_user("initiator")
        theirs = submit(initiator, "c", "the acquisition target is Acme")
        assert client_of(colleague).get(f"/api/runs/{theirs.pk}/").status_code == 404
        mine = submit(colleague, "c", "my own run")
        webhook_deliver_due()
        rows = WebhookDelivery.objects.filter(event_type="message.user")
        assert rows.get(run_id=theirs.pk).status == "withheld"
        assert rows.get(run_id=mine.pk).status == "delivered"
        bodies = [json.loads(seen.body) for seen in receiver.received]
        assert {body["run"] for body in bodies} == {mine.pk}
        assert "Acme" not in "".join(seen.body.decode() for seen in receiver.received)
    finally:
        receiver.close()


def test_a_webhook_whose_owner_is_gone_or_deactivated_sends_nothing(
    bare_staff, django_user_model, settings
):
    """SEC-15: a deactivated owner's webhook (or one whose owner was deleted) withholds."""
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    make_configuration("c")
    receiver = Receiver(statuses=[200])
    try:
        Webhook.objects.create(url=receiver.url, secret="s" * 16, created_by=bare_staff)
        Webhook.objects.create(url=receiver.url, secret="s" * 16, created_by=None)
        bare_staff.is_active = False
        bare_staff.save()
        submit(bare_staff, "c", "before she left")
        webhook_deliver_due()
        statuses = set(WebhookDelivery.objects.values_list("status", flat=True))
        assert statuses == {"withheld"}
        assert receiver.received == []
    finally:
        receiver.close()
