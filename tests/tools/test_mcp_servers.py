"""MCP-1, MCP-2: MCP servers as catalog entries, against real servers (the SDK's own
MCPServer over streamable HTTP on loopback, and one over stdio): SEC-9 on their URLs,
stdio only for listed commands, a bearer token from the servers' own allow-list (SEC-11);
discovery shows the difference against what is pinned and nothing is offered until staff
accept it; pinned tools are registered as `<server>.<tool>` with a version digest and the
declared class and effect; a schema changed upstream is a new version, and an approval
given for the old one is refused (HITL-10)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agentruns.classes import DataClass
from agentruns.errors import Conflict, McpUnavailable
from agentruns.models import McpServer, McpTool, Note, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.services.mcp import (
    mcp_listing_digest,
    mcp_server_accept,
    mcp_server_changes,
    mcp_server_refresh,
    mcp_server_review,
    mcp_slug_problem,
)
from agentruns.tools.mcp.listing import listed_tools, tool_version
from agentruns.tools.mcp.pinned import sync_pinned
from agentruns.tools.names import wire_name
from agentruns.tools.registry import REGISTRY, Effect
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, allow, client_for, results_by_call, resume
from tests.support.mcp import STDIO_COMMAND, STDIO_COMMANDS, make_tracker, pin, register, serve_http
from tests.support.runs import park

pytestmark = pytest.mark.django_db

TRACKER_TOOLS = {"get_ticket", "add_comment", "customer_lookup", "slow", "fail", "meet"}


@pytest.fixture
def loopback(settings):
    """The deployer lists loopback for MCP servers (the test servers listen there)."""
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = ["127.0.0.1"]


@pytest.fixture
def live():
    tracker = make_tracker()
    with serve_http(tracker.server) as url:
        tracker.url = url
        yield tracker


# ------------------------------------------------------------------- MCP-1 registration


def test_mcp1_sec9_a_loopback_url_is_refused_unless_the_deployer_lists_it(settings):
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = []
    for url in ("http://127.0.0.1:9/mcp", "http://169.254.169.254/mcp", "http://10.0.0.1/mcp"):
        with pytest.raises(ValidationError) as refused:
            register("inner", url)
        assert "AGENTRUNS_MCP_ALLOWED_HOSTS" in str(refused.value)
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    assert register("inner", "http://127.0.0.1:9/mcp").pk
    with pytest.raises(ValidationError):
        register("other", "file:///etc/passwd")


def test_mcp1_the_demo_url_alone_is_exempt(settings):
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = []
    settings.AGENTRUNS_DEMO_MCP_URL = "http://127.0.0.1:8765/mcp"
    assert register("demo", "http://127.0.0.1:8765/mcp").pk
    with pytest.raises(ValidationError):
        register("next-port", "http://127.0.0.1:8766/mcp")


def test_mcp1_stdio_runs_only_a_command_the_deployer_listed(settings, admin_client):
    settings.AGENTRUNS_MCP_STDIO_COMMANDS = STDIO_COMMANDS
    with pytest.raises(ValidationError) as refused:
        register("shell", transport="stdio", command="rm -rf /")
    assert STDIO_COMMAND in str(refused.value)
    assert register("stdio-tracker", transport="stdio", command=STDIO_COMMAND).pk
    # The admin offers the listed names, never a text field for a command line.
    page = admin_client.get(reverse("admin:agentruns_mcpserver_add")).content.decode()
    assert f'<option value="{STDIO_COMMAND}">' in page
    assert '<input type="text" name="command"' not in page


def test_mcp1_sec11_the_token_comes_only_from_the_mcp_allow_list(settings, loopback, monkeypatch):
    settings.AGENTRUNS_MCP_KEY_VARS = ["TRACKER_MCP_TOKEN"]
    # A provider's key is never an MCP server's token (a list of its own).
    with pytest.raises(ValidationError) as refused:
        register("leaky", "http://127.0.0.1:9/mcp", auth_env="OPENAI_API_KEY")
    assert "AGENTRUNS_MCP_KEY_VARS" in str(refused.value)
    tracker = make_tracker()
    seen: list[dict[str, str]] = []
    monkeypatch.setenv("TRACKER_MCP_TOKEN", "tracker-token-1")
    with serve_http(tracker.server, headers=seen) as url:
        server = register("tracker", url, auth_env="TRACKER_MCP_TOKEN")
        mcp_server_refresh(server=server)
    assert seen and all(h.get("authorization") == "Bearer tracker-token-1" for h in seen)


def test_mcp1_a_slug_may_not_reach_into_tools_registered_in_code():
    for taken in ("notes", "clock", "tool", "ask", "http", "test"):
        assert mcp_slug_problem(taken), taken
    assert mcp_slug_problem("tracker") is None


def test_mcp1_a_server_that_is_down_cannot_be_listed_and_nothing_changes(loopback):
    server = register("gone", "http://127.0.0.1:9/mcp")
    with pytest.raises(McpUnavailable) as failed:
        mcp_server_refresh(server=server)
    assert "could not be reached" in failed.value.detail
    server.refresh_from_db()
    assert server.discovered_at is None


# ------------------------------------------------------------------- MCP-2 discovery, pinning


def test_mcp2_discovery_shows_the_difference_and_pins_only_on_accept(loopback, live):
    server = register("tracker", live.url)
    changes = mcp_server_refresh(server=server)
    assert {c.name: c.kind for c in changes} == dict.fromkeys(TRACKER_TOOLS, "added")
    sync_pinned()
    assert REGISTRY.get("tracker.get_ticket") is None  # nothing offered before accepting
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)
    sync_pinned()
    tool = REGISTRY.get("tracker.get_ticket")
    assert tool is not None
    assert tool.wire_name == "tracker_get_ticket"
    assert REGISTRY.by_wire("tracker_get_ticket") is tool
    assert tool.group == "tracker"
    # MCP-2's defaults: confidential output, a write effect (so approval is needed).
    assert (tool.output_class, tool.effect) == (DataClass.CONFIDENTIAL, Effect.WRITE)
    pinned = McpTool.objects.get(server=server, name="get_ticket")
    assert (
        tool.version
        == pinned.version
        == tool_version("get_ticket", pinned.description, pinned.input_schema)
    )
    assert tool.parameters["properties"]["ticket_id"]["type"] == "string"
    # A configuration grants a server's tools by name, by group or by `<server>.*`.
    assert REGISTRY.expand(["tracker.*"]) == {f"tracker.{name}" for name in TRACKER_TOOLS}
    assert REGISTRY.expand(["tracker.fail"]) == {"tracker.fail"}
    # Refreshing again: everything is unchanged.
    again = mcp_server_refresh(server=server)
    assert {c.kind for c in again} == {"unchanged"}


def test_mcp2_an_inactive_server_offers_nothing(loopback, live):
    server = pin(register("tracker", live.url))
    sync_pinned()
    assert REGISTRY.get("tracker.get_ticket")
    server.active = False
    server.save()
    sync_pinned()
    assert REGISTRY.get("tracker.get_ticket") is None


def test_mcp2_a_declared_class_and_effect_override_the_servers(loopback, live):
    server = pin(register("tracker", live.url, output_class="internal", effect="read_only"))
    McpTool.objects.filter(server=server, name="customer_lookup").update(output_class="restricted")
    McpTool.objects.filter(server=server, name="add_comment").update(effect="write")
    McpServer.objects.get(pk=server.pk).save()  # a catalog write: the generation moves
    sync_pinned()
    assert REGISTRY.get("tracker.get_ticket").output_class is DataClass.INTERNAL
    assert REGISTRY.get("tracker.customer_lookup").output_class is DataClass.RESTRICTED
    assert REGISTRY.get("tracker.get_ticket").effect is Effect.READ_ONLY
    assert REGISTRY.get("tracker.add_comment").effect is Effect.WRITE


def test_mcp2_accepting_is_bound_to_the_listing_that_was_reviewed(loopback, live):
    server = register("tracker", live.url)
    mcp_server_refresh(server=server)
    reviewed = mcp_listing_digest(server)
    live.server.remove_tool("fail")
    mcp_server_refresh(server=server)  # someone listed again meanwhile
    with pytest.raises(Conflict):
        mcp_server_accept(server_id=server.pk, listing=reviewed, user=None)
    assert not McpTool.objects.filter(server=server).exists()


def test_mcp2_a_removed_tool_is_unpinned(loopback, live):
    server = pin(register("tracker", live.url))
    live.server.remove_tool("fail")
    changes = {c.name: c.kind for c in mcp_server_refresh(server=server)}
    assert changes["fail"] == "removed"
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)
    assert not McpTool.objects.filter(server=server, name="fail").exists()


def test_mcp2_what_a_server_lists_is_hostile_and_refused_with_a_reason():
    obj = {"type": "object", "properties": {}}
    raw = [
        {"name": "ok", "description": "fine", "input_schema": obj},
        {"name": "bad name!", "description": "", "input_schema": obj},
        {"name": "x" * 61, "description": "", "input_schema": obj},
        {"name": "ok", "description": "twice", "input_schema": obj},
        {"name": "a.b", "description": "", "input_schema": obj},
        {"name": "a_b", "description": "same wire name", "input_schema": obj},
        {
            "name": "slow_re",
            "description": "",
            "input_schema": {
                "type": "object",
                "properties": {"q": {"type": "string", "pattern": "(a+)+\\1"}},
            },
        },
        {
            "name": "remote",
            "description": "",
            "input_schema": {
                "type": "object",
                "properties": {"q": {"$ref": "https://evil.example/s.json"}},
            },
        },
        {"name": "not_object", "description": "", "input_schema": {"type": "string"}},
        {"name": "long", "description": "d" * 5000, "input_schema": obj},
        "not even an object",
    ]
    problems: dict[str, str] = {}
    for tool in listed_tools("srv", raw):
        problems.setdefault(tool.name, tool.problem)
    assert problems["ok"] == ""
    assert "letters, digits" in problems["bad name!"]
    assert "64 characters" in problems["x" * 61]
    assert problems["a.b"] == ""
    assert "srv_a_b" in problems["a_b"]
    assert "RE2" in problems["slow_re"]
    assert "outside itself" in problems["remote"]
    assert "object schema" in problems["not_object"]
    assert "description" in problems["long"]
    assert "letters, digits" in problems[""]
    twice = [t for t in listed_tools("srv", raw) if t.name == "ok"]
    assert [bool(t.problem) for t in twice] == [False, True]


def test_mcp2_a_pinned_schema_runs_its_patterns_on_re2(loopback):
    """A pattern from a server is checked against a model's arguments in linear time."""
    server = register("regex", "http://127.0.0.1:9/mcp")
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "pattern": "^(a|aa)+$"}},
        "required": ["q"],
    }
    mcp_server_review(server=server, listed=[{"name": "find", "input_schema": schema}])
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)
    sync_pinned()
    tool = REGISTRY.get("regex.find")
    assert tool.argument_errors({"q": "a" * 5000 + "b"})  # answers at once, and says no


# ------------------------------------------------------------------- the admin's path


def test_mcp2_the_admin_refreshes_shows_the_difference_and_accepts(loopback, live, admin_client):
    server = register("tracker", live.url)
    client = admin_client
    review = reverse("admin:agentruns_mcpserver_tools", args=[server.pk])
    page = client.post(review, {"action": "refresh"}).content.decode()
    assert "tracker.customer_lookup" in page and "added" in page
    server.refresh_from_db()
    response = client.post(review, {"action": "accept", "listing": mcp_listing_digest(server)})
    assert response.status_code == 302
    assert set(McpTool.objects.filter(server=server).values_list("name", flat=True)) == (
        TRACKER_TOOLS
    )
    # The class and effect of a pinned tool are declared on the server's page.
    change = reverse("admin:agentruns_mcpserver_change", args=[server.pk])
    assert "customer_lookup" in client.get(change).content.decode()


def test_mcp2_the_api_refreshes_accepts_and_declares(loopback, live, api):
    created = api.post(
        "/api/mcp-servers/", {"slug": "tracker", "name": "Tracker", "url": live.url}, format="json"
    )
    assert created.status_code == 201, created.json()
    refreshed = api.post("/api/mcp-servers/tracker/refresh/").json()
    assert {c["kind"] for c in refreshed["changes"]} == {"added"}
    accepted = api.post(
        "/api/mcp-servers/tracker/accept/", {"listing": refreshed["listing"]}, format="json"
    )
    assert accepted.status_code == 200
    declared = api.patch(
        "/api/mcp-servers/tracker/tools/customer_lookup/",
        {"output_class": "restricted", "effect": "read_only"},
        format="json",
    ).json()
    assert (declared["declared_class"], declared["declared_effect"]) == ("restricted", "read_only")
    assert declared["registered_as"] == "tracker.customer_lookup"
    assert (
        api.post(
            "/api/mcp-servers/", {"slug": "notes", "name": "n", "url": live.url}, format="json"
        ).status_code
        == 400
    )
    down = api.post(
        "/api/mcp-servers/",
        {"slug": "down", "name": "d", "url": "http://127.0.0.1:9/mcp"},
        format="json",
    )
    assert down.status_code == 201
    assert api.post("/api/mcp-servers/down/refresh/").status_code == 424


# ------------------------------------------------------------------- stdio


def test_mcp2_a_stdio_server_is_listed_pinned_and_called(settings, staff):
    settings.AGENTRUNS_MCP_STDIO_COMMANDS = STDIO_COMMANDS
    server = pin(register("stdio-tracker", transport="stdio", command=STDIO_COMMAND))
    assert {t.name for t in server.tools.all()} == {"get_ticket", "add_comment", "customer_lookup"}
    McpTool.objects.filter(server=server, name="get_ticket").update(effect="read_only")
    server.save()
    turns = [
        {"tool_calls": [{"name": "stdio-tracker.get_ticket", "arguments": {"ticket_id": "T-2"}}]},
        {"text": "read it"},
    ]
    scripted_configuration("over-stdio", turns, allowed_tools=["stdio-tracker.*"])
    run = park_or_complete(staff, "over-stdio")
    assert run.status == "completed"
    [result] = results_by_call(run.pk).values()
    assert result["status"] == "ok"
    assert "Invoice PDF has the wrong VAT rate" in result["content"]


def park_or_complete(user, configuration):
    from tests.support.runs import submit

    run = submit(user, configuration)
    execute_run(run.pk)
    run.refresh_from_db()
    return run


# ------------------------------------------------------------------- HITL-10


def test_mcp2_hitl10_an_upstream_schema_change_refuses_the_old_approval(loopback, live, staff):
    """A run waits for approval of tracker.add_comment; upstream changes the tool's schema
    and staff accept the new listing: the approval was for the old version, so the call is
    not executed (the server never sees it) and the model is told it is no longer
    permitted."""
    approver = grant(staff, "approve_run")
    server = pin(register("tracker", live.url))  # add_comment: confidential, write
    turns = [
        {
            "tool_calls": [
                {
                    "id": "call_c",
                    "name": "tracker.add_comment",
                    "arguments": {"ticket_id": "T-1", "text": "rollback"},
                }
            ]
        },
        {"text": "done"},
    ]
    scripted_configuration("mcp-approve", turns, allowed_tools=["tracker.*"])
    run = park(approver, "mcp-approve")
    ticket = active_ticket(run.pk)
    old = ToolInvocation.objects.get(run=run, call_id="call_c").tool_version

    live.server.remove_tool("add_comment")

    @live.server.tool(name="add_comment")
    def add_comment_v2(ticket_id: str, text: str, visibility: str = "internal") -> str:
        """Add a comment to a ticket, public or internal."""
        return "added"

    changes = {c.name: c for c in mcp_server_refresh(server=server)}
    assert changes["add_comment"].kind == "changed"
    assert changes["add_comment"].pinned_version == old != changes["add_comment"].listed.version
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)

    response = resume(client_for(approver), run.pk, allow(ticket))
    assert response.status_code == 200, response.json()
    assert execute_run(run.pk) == "completed"
    result = results_by_call(run.pk)["call_c"]
    assert result["status"] == "not_permitted"
    assert "changed version" in result["content"]
    assert live.calls("add_comment") == []
    assert Note.objects.count() == 0


def test_mcp2_the_wire_name_of_a_pinned_tool_leads_back_to_it(loopback, live):
    server = pin(register("tracker", live.url))
    sync_pinned()
    for tool in server.tools.all():
        name = f"tracker.{tool.name}"
        assert REGISTRY.by_wire(wire_name(name)).name == name


def test_mcp2_the_listing_under_review_changes_no_generation(loopback, live):
    from agentruns.models import CatalogGeneration

    server = register("tracker", live.url)
    before = CatalogGeneration.current()
    mcp_server_refresh(server=server)
    assert CatalogGeneration.current() == before
    assert {c.kind for c in mcp_server_changes(server=server)} == {"added"}
