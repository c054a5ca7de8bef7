"""MCP-5 in Chromium: the demo's MCP flow as a new user clicks it, offline. The demo's own
tracker (its code, served on loopback as `manage.py serve` runs it) is registered by the
demo data; a real cluster runs `mcp-demo`: the playground's readout lists the tracker's
tools with their classes, the run reads a ticket and a restricted customer record and
waits for approval of a comment; the approver allows it from the inbox after the
configuration was re-pointed at a global provider, and the inspector shows the run refused
by the context gate, naming the reply that read the restricted record (CG-12).
`mcp-demo-global` is refused the lookup (TOOL-2), and the admin's "Refresh tools" shows the
listing against what is pinned (MCP-2)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from mcp.server.mcpserver import MCPServer
from playwright.sync_api import Page, expect

from agentruns import events as ev
from agentruns.demo import load_demo_data, load_demo_users
from agentruns.demo_mcp import build_tracker
from agentruns.models import Configuration, Event, Provider, Run, Ticket
from tests.support.clusters import Clusters
from tests.support.mcp import serve_http

LIVE = 30_000


@pytest.fixture
def tracker(settings, transactional_db) -> Iterator[MCPServer]:
    server = build_tracker()
    with serve_http(server) as url:
        settings.AGENTRUNS_DEMO_MCP_URL = url
        load_demo_data()
        load_demo_users()
        yield server


@pytest.fixture
def tracker_url(tracker, settings) -> str:
    return settings.AGENTRUNS_DEMO_MCP_URL


@pytest.fixture
def mcp_cluster(tracker_url: str, tmp_path: Path) -> Iterator[Clusters]:
    """A cluster that knows where the demo tracker listens (its one SEC-9 exemption)."""
    clusters = Clusters(tmp_path)
    clusters.start("mcp", AGENTRUNS_DEMO_MCP_URL=tracker_url)
    try:
        yield clusters
    finally:
        clusters.close()


def admin_user():
    return get_user_model().objects.get(username="admin")


def run_in_playground(page: Page, configuration: str) -> int:
    page.goto(f"/playground/?configuration={configuration}")
    page.get_by_label("Task").fill("Triage T-1")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page).to_have_url(re.compile(r"/playground/runs/\d+/$"))
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_mcp5_the_demo_calls_an_mcp_tool_asks_approval_and_refuses_what_read_the_record(
    mcp_cluster, page_as, screenshot
):
    page = page_as(admin_user())
    page.goto("/playground/?configuration=mcp-demo")
    tools = page.get_by_role("table", name="Granted tools")
    expect(tools).to_contain_text("tracker.customer_lookup")
    expect(tools.locator("tr", has_text="tracker.customer_lookup")).to_contain_text("restricted")
    screenshot(page, "mcp-playground-readout")

    run_id = run_in_playground(page, "mcp-demo")
    lookup = page.locator("[data-call]").filter(has_text="tracker.customer_lookup")
    expect(lookup).to_contain_text("J. Doe", timeout=LIVE)
    comment = page.locator("[data-call]").filter(has_text="tracker.add_comment")
    expect(comment).to_contain_text("Waiting for approval", timeout=LIVE)
    screenshot(page, "mcp-inspector-awaiting")

    # Staff re-point the configuration at a global provider while the run waits.
    configuration = Configuration.objects.get(slug="mcp-demo")
    configuration.provider = Provider.objects.get(slug="global-scripted")
    configuration.save()
    ticket = Ticket.objects.get(run_id=run_id, status=Ticket.Status.ACTIVE)
    inbox = page_as(admin_user())
    inbox.goto(f"/inbox/{ticket.correlation_id}/")
    card = inbox.locator(f'[data-ticket="{ticket.correlation_id}"]')
    expect(card).to_contain_text("tracker.add_comment")
    card.get_by_role("button", name="Approve").click()
    expect(inbox.get_by_role("status").first).to_contain_text("Approved: tracker.add_comment")

    # CG-12: the reply that proposed the comment read the customer record, so it carries
    # that class and the send after the re-point is refused, naming it (not only withheld).
    expect(page.locator("#failure")).to_contain_text(
        'reply of turn 2 (set by tool result "tracker.customer_lookup", restricted)',
        timeout=LIVE,
    )
    expect(page.locator("#failure")).not_to_contain_text("J. Doe")
    assert Run.objects.get(pk=run_id).status == Run.Status.FAILED

    refused_run = run_in_playground(page, "mcp-demo-global")
    refused = page.locator("[data-call]").filter(has_text="tracker.customer_lookup")
    expect(refused.locator(".status")).to_have_text("refused", timeout=LIVE)
    expect(refused).to_contain_text("returns restricted data, above the ceiling internal")
    expect(page.locator("#final-reply")).to_be_visible(timeout=LIVE)
    screenshot(page, "mcp-refused")
    assert Run.objects.get(pk=refused_run).status == Run.Status.COMPLETED


def test_cg12_fork1_a_fork_of_mcp_demo_onto_the_global_provider_is_refused_naming_the_reply(
    mcp_cluster, page_as, screenshot
):
    """The demo of issue 47: `mcp-demo` reads the restricted customer record and, once the
    comment is approved, ends; forking its last turn onto `mcp-demo-global` is refused by
    the context gate, naming the reply that carried the record's class and the lookup that
    set it (CG-12, CG-13, FORK-1) — and never a word of the record."""
    page = page_as(admin_user())
    run_id = run_in_playground(page, "mcp-demo")
    comment = page.locator("[data-call]").filter(has_text="tracker.add_comment")
    expect(comment).to_contain_text("Waiting for approval", timeout=LIVE)

    inbox = page_as(admin_user())
    inbox.goto("/inbox/")
    card = inbox.locator("[data-ticket]").filter(has_text="tracker.add_comment")
    card.get_by_role("button", name="Approve").click()
    expect(inbox.get_by_role("status").first).to_contain_text("Approved: tracker.add_comment")
    expect(page.locator("[data-status]").first).to_have_text("completed", timeout=LIVE)

    last = Event.objects.filter(run_id=run_id, type=ev.ASSISTANT).order_by("-sequence")[0]
    page.locator(f"#fork-inspector-{last.sequence} > summary").click()
    form = page.get_by_role("form", name=f"Fork from event #{last.sequence}")
    form.get_by_label("Configuration").select_option("mcp-demo-global")
    form.get_by_label("New prompt (optional)").fill("Summarise it for the customer.")
    form.get_by_role("button", name="Fork").click()

    fork = Run.objects.get(forked_from_id=run_id)
    expect(page).to_have_url(f"/playground/runs/{fork.pk}/")
    failure = page.locator("#failure")
    expect(failure).to_contain_text(
        'reply of turn 3 (set by tool result "tracker.customer_lookup", restricted)',
        timeout=LIVE,
    )
    expect(failure).to_contain_text("above the ceiling internal of the reachable zone")
    expect(failure).not_to_contain_text("J. Doe")
    screenshot(page, "mcp-refused-reply", full_page=False)
    fork.refresh_from_db()
    assert (fork.status, fork.failure["source_kind"]) == (Run.Status.FAILED, "reply")
    assert fork.failure["origin"] == {"kind": "tool_result", "name": "tracker.customer_lookup"}


def test_mcp2_the_admin_refreshes_the_trackers_tools_and_shows_the_difference(
    tracker, page_as, screenshot
):
    """Upstream, add_comment gained a parameter and a new tool appeared: the review shows
    both before anything is offered; accepting pins them."""
    tracker.remove_tool("add_comment")

    @tracker.tool(name="add_comment")
    def add_comment(ticket_id: str, text: str, visibility: str = "internal") -> str:
        """Add a comment to a ticket, visible to the team or to the customer."""
        return "added"

    @tracker.tool()
    def close_ticket(ticket_id: str) -> str:
        """Close a ticket."""
        return "closed"

    page = page_as(admin_user())
    page.goto("/admin/agentruns/mcpserver/")
    page.get_by_role("link", name="tracker", exact=True).click()
    page.get_by_role("link", name="Refresh tools").click()
    page.get_by_role("button", name="Refresh tools").click()
    table = page.locator("table.mcp-changes")
    expect(table.locator("tr.change-unchanged")).to_have_count(2)
    expect(table.locator("tr.change-changed")).to_contain_text("tracker.add_comment")
    expect(table.locator("tr.change-added")).to_contain_text("tracker.close_ticket")
    screenshot(page, "mcp-admin-review")
    page.get_by_role("button", name="Accept this listing").click()
    expect(page.get_by_text("Accepted: 2 tool(s) pinned anew or again.")).to_be_visible()
    expect(page.locator("#tools-group")).to_contain_text("close_ticket")
