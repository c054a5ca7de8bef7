"""SEC-18: bounded everywhere. JSON a person, a host or a server sends is bounded in depth
and size before any recursive function sees it; a NUL in any page form is a 400; no input
is a 500."""

from __future__ import annotations

import pytest
from django.test import Client
from mcp.server.mcpserver import MCPServer

from agentruns.classes import DataClass
from agentruns.models import McpServer, Run
from agentruns.tools.mcp.client import MAX_ANSWER_BYTES, Endpoint, call_tool
from agentruns.tools.mcp.listing import listed_tools
from agentruns.tools.registry import Effect, Tool, ToolOutput
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import (
    active_ticket,
    allow,
    answer,
    client_for,
    identity,
    picture,
    resume,
    write_call,
)
from tests.support.mcp import serve_http
from tests.support.routing import ASK_TURNS
from tests.support.runs import park

SELF = {"$defs": {"node": {"$ref": "#/$defs/node"}}}
LOOPS = {
    "self": {"type": "object", "properties": {"x": {"$ref": "#/$defs/node"}}, **SELF},
    "mutual": {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
        "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
    },
    "root": {"type": "object", "allOf": [{"$ref": "#"}]},
    "dangling": {"type": "object", "properties": {"x": {"$ref": "#/$defs/none"}}},
}
TREE = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
}


def test_mcp_review_refuses_a_schema_whose_references_loop_and_keeps_recursive_data():
    """SEC-18, MCP-2: `$defs.node = {"$ref": "#/$defs/node"}` made every call raise
    RecursionError in the worker; review refuses it with the reason. A tree schema, whose
    references descend into the value, stays pinnable."""
    raw = [{"name": name, "description": "", "input_schema": s} for name, s in LOOPS.items()]
    raw.append({"name": "tree", "description": "", "input_schema": TREE})
    problems = {tool.name: tool.problem for tool in listed_tools("srv", raw)}
    assert "reference cycle" in problems["self"]
    assert "reference cycle" in problems["mutual"]
    assert "reference cycle" in problems["root"]
    assert "cannot resolve" in problems["dangling"]
    assert problems["tree"] == ""


def test_a_looping_schema_pinned_before_gives_the_model_an_error_not_a_dead_worker():
    """A tool pinned before review refused such schemas: checking its arguments is an
    error result for the model (the worker lives, the run is not re-asked to exhaustion)."""

    def never(arguments, context):
        return ToolOutput("ran")

    tool = Tool(
        name="srv.loop",
        description="",
        parameters=LOOPS["self"],
        group="srv",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="v1",
        execute=never,
    )
    errors = tool.argument_errors({"x": 1})
    assert errors and "refers to itself" in errors[0]


def nested(levels: int) -> dict:
    value: dict = {"leaf": "x"}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


@pytest.mark.django_db
@pytest.mark.parametrize("levels", [130, 600])
def test_a_deeply_nested_answer_or_edit_over_the_api_is_a_4xx_and_changes_nothing(
    levels, django_user_model
):
    """SEC-18: ~600 levels parsed, then redaction recursed out (500). The API refuses a
    body deeper than 128 levels as malformed."""
    approver = grant(django_user_model.objects.create_user("ada"), "approve_run")
    scripted_configuration("pay", [{"tool_calls": [write_call("t")]}, {"text": "ok"}])
    run = park(django_user_model.objects.create_user("initiator"), "pay")
    before = picture(run.pk)
    body = allow(active_ticket(run.pk))
    body["result"]["arguments"] = nested(levels)
    response = resume(client_for(approver), run.pk, body)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed"
    assert picture(run.pk) == before


@pytest.mark.django_db
def test_an_answer_or_edit_beyond_the_services_bounds_is_refused_on_every_path(
    django_user_model,
):
    """SEC-18: within the API's depth, the service still bounds what redaction and
    validation walk (64 levels, 10 000 values), for the pages and the admin alike."""
    approver = grant(django_user_model.objects.create_user("ada"), "approve_run")
    scripted_configuration("pay", [{"tool_calls": [write_call("t")]}, {"text": "ok"}])
    initiator = django_user_model.objects.create_user("initiator")
    run = park(initiator, "pay")
    before = picture(run.pk)
    for arguments in (nested(100), {"title": "t", "body": "b", "many": list(range(20_000))}):
        body = allow(active_ticket(run.pk))
        body["result"]["arguments"] = arguments
        response = resume(client_for(approver), run.pk, body)
        assert response.status_code == 422, response.content
        assert response.json()["code"] == "invalid_arguments"
    assert picture(run.pk) == before
    scripted_configuration("ask", ASK_TURNS)
    asked = park(initiator, "ask")
    refused = resume(client_for(initiator), asked.pk, answer(active_ticket(asked.pk), nested(100)))
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_input"


@pytest.mark.django_db
def test_a_nul_in_any_page_form_is_a_400_and_changes_nothing(django_user_model):
    """SEC-18: a NUL in a form field reached PostgreSQL (DataError, 500): the run start's
    task, an inbox note (the card's Approve), a fork's input."""
    approver = grant(django_user_model.objects.create_user("ada"), "approve_run")
    scripted_configuration("pay", [{"tool_calls": [write_call("t")]}, {"text": "ok"}])
    run = park(approver, "pay")
    ticket = active_ticket(run.pk)
    browser = Client()
    browser.force_login(approver)
    before = (Run.objects.count(), picture(run.pk))
    posts = [
        ("/runs/start/", {"configuration": "pay", "task": "hello\x00"}),
        (
            f"/inbox/{ticket.correlation_id}/resume/",
            {**identity(ticket), "kind": "permission", "decision": "allow", "note": "ok\x00"},
        ),
        (f"/runs/{run.pk}/fork/", {"at": "", "input": "again\x00"}),
        ("/runs/start/", {"configuration": "pay", "task\x00": "hello"}),
    ]
    for url, data in posts:
        response = browser.post(url, data)
        assert response.status_code == 400, (url, response.status_code)
        assert b"NUL" in response.content
    assert (Run.objects.count(), picture(run.pk)) == before


def big_server() -> MCPServer:
    server = MCPServer("big")

    @server.tool()
    def dump(megabytes: int) -> str:
        return "x" * (megabytes << 20)

    @server.tool()
    def small() -> str:
        return "fine"

    return server


def test_an_mcp_answer_is_read_as_it_arrives_and_refused_past_one_mebibyte(settings):
    """SEC-18, MCP-3: a result was read whole before its 64 k cut (80 MB cost 160 MB of
    memory); an answer over 1 MiB is refused while it arrives and the model is told."""
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    with serve_http(big_server()) as url:
        endpoint = Endpoint("big", McpServer.Transport.STREAMABLE_HTTP, url)
        output = call_tool(endpoint, "dump", {"megabytes": 3}, timeout=30)
        assert not output.ok
        assert output.content == (
            f"Error: the MCP server big sent an answer over {MAX_ANSWER_BYTES} bytes; "
            "nothing of it was kept."
        )
        assert call_tool(endpoint, "small", {}, timeout=30).content == "fine"


def test_mcp_error_texts_name_no_address_or_reachability_detail(settings):
    """Settled (issue 48, item 8): what refused a connection (SEC-9's private addresses)
    goes to the log, not into the model's context."""
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = []
    endpoint = Endpoint("inside", McpServer.Transport.STREAMABLE_HTTP, "http://10.0.0.5/mcp")
    output = call_tool(endpoint, "anything", {}, timeout=5)
    assert output.content == "Error: the MCP server inside could not be reached."
