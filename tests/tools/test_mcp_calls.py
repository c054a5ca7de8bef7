"""MCP-3: a call to an MCP tool is an invocation like any other (TOOL-3, TOOL-4), against
the SDK's own server over streamable HTTP on loopback: the invocation row and its
idempotency key before the call, the `effect_sent_at` watermark before the request, and
after a worker is SIGKILLed between the request and its result the write is `uncertain`,
never sent again; a server that is down, slow or errs gives the model an error result with
the server's words (redacted), within the configuration's tool timeout; the calls of one
turn run at the same time."""

from __future__ import annotations

import time

import pytest

from agentruns import events as ev
from agentruns.models import Event, McpTool, Run, ToolInvocation
from agentruns.runtime.effects import idempotency_key
from agentruns.runtime.loop import execute_run
from agentruns.runtime.state import ProposedCall
from agentruns.services.mcp import mcp_listing_digest, mcp_server_accept, mcp_server_review
from agentruns.tools.mcp.pinned import sync_pinned
from agentruns.tools.registry import REGISTRY
from tests.support.catalog import scripted_configuration
from tests.support.crash import expire_lease, run_child
from tests.support.hitl import results_by_call
from tests.support.mcp import FAILURE, make_tracker, pin, register, serve_http
from tests.support.runs import submit

READS = ("get_ticket", "customer_lookup", "slow", "fail", "meet")


@pytest.fixture
def loopback(settings):
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = ["127.0.0.1"]


@pytest.fixture
def live(loopback):
    """The tracker, pinned, its reads declared read-only (add_comment stays a write)."""
    tracker = make_tracker()
    with serve_http(tracker.server) as url:
        server = pin(register("tracker", url))
        McpTool.objects.filter(server=server, name__in=READS).update(effect="read_only")
        server.save()  # the generation moves: every process registers the tools anew
        tracker.url = url
        yield tracker


def one_call(name: str, arguments: dict, call_id: str = "call_1") -> list[dict]:
    return [
        {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments}]},
        {"text": "done"},
    ]


def drive(user, slug: str) -> Run:
    run = submit(user, slug)
    execute_run(run.pk)
    run.refresh_from_db()
    return run


@pytest.mark.django_db
def test_mcp3_a_call_is_an_invocation_with_its_idempotency_key(live, staff):
    scripted_configuration(
        "reads", one_call("tracker.get_ticket", {"ticket_id": "T-1"}), allowed_tools=["tracker.*"]
    )
    run = drive(staff, "reads")
    assert run.status == Run.Status.COMPLETED
    result = results_by_call(run.pk)["call_1"]
    assert result["status"] == ev.OK
    assert result["content"].startswith("T-1: Checkout page times out")
    assert result["class"] == "confidential"  # the server's default, as it ran (MCP-4)
    invocation = ToolInvocation.objects.get(run=run, call_id="call_1")
    sync_pinned()
    tool = REGISTRY.get("tracker.get_ticket")
    assert invocation.tool == "tracker.get_ticket"
    assert invocation.tool_version == tool.version
    call = ProposedCall("call_1", "tracker.get_ticket", {"ticket_id": "T-1"})
    assert invocation.idempotency_key == idempotency_key(run.pk, 0, call, tool)
    assert invocation.status == ToolInvocation.Status.COMPLETED
    assert live.calls("get_ticket") == [{"ticket_id": "T-1"}]


@pytest.mark.django_db
def test_mcp3_a_server_that_is_down_gives_the_model_an_error_result(loopback, staff):
    server = register("gone", "http://127.0.0.1:9/mcp")
    schema = {"type": "object", "properties": {"ticket_id": {"type": "string"}}}
    mcp_server_review(server=server, listed=[{"name": "get_ticket", "input_schema": schema}])
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)
    McpTool.objects.filter(server=server).update(effect="read_only")
    server.save()
    scripted_configuration(
        "down", one_call("gone.get_ticket", {"ticket_id": "T-1"}), allowed_tools=["gone.*"]
    )
    run = drive(staff, "down")
    assert (run.status, run.final_reply) == (Run.Status.COMPLETED, "done")
    result = results_by_call(run.pk)["call_1"]
    assert result["status"] == ev.ERROR
    assert "the MCP server gone could not be reached" in result["content"]


@pytest.mark.django_db
def test_mcp3_a_slow_server_is_cut_off_at_the_configurations_tool_timeout(live, staff):
    scripted_configuration(
        "slow",
        one_call("tracker.slow", {"seconds": 20}),
        allowed_tools=["tracker.*"],
        tool_timeout_seconds=0.5,
    )
    started = time.monotonic()
    run = drive(staff, "slow")
    took = time.monotonic() - started
    assert run.status == Run.Status.COMPLETED
    result = results_by_call(run.pk)["call_1"]
    assert result["status"] == ev.ERROR
    assert "did not answer within 0.5 s" in result["content"]
    assert took < 10, took  # nowhere near the 20 s the tool would take
    assert ToolInvocation.objects.get(run=run).status == ToolInvocation.Status.FAILED


@pytest.mark.django_db
def test_mcp3_an_erring_server_gives_its_words_redacted(live, staff):
    scripted_configuration("fails", one_call("tracker.fail", {}), allowed_tools=["tracker.*"])
    run = drive(staff, "fails")
    assert run.status == Run.Status.COMPLETED
    result = results_by_call(run.pk)["call_1"]
    assert result["status"] == ev.ERROR
    assert "Error from the MCP server tracker" in result["content"]
    assert "the tracker database is down" in result["content"]
    assert "hunter2secret" not in result["content"]  # CG-11 on what a tool returns
    assert "hunter2secret" in FAILURE
    kinds = [e.payload for e in Event.objects.filter(run=run, type=ev.SECRET_REDACTED)]
    assert kinds and kinds[0]["where"] == "tool:tracker.fail"


@pytest.mark.django_db
def test_mcp3_the_calls_of_one_turn_run_at_the_same_time(live, staff):
    """`meet` answers only once a second `meet` call has arrived: one after the other,
    the first would wait out the tool timeout."""
    turns = [
        {
            "tool_calls": [
                {"id": "call_a", "name": "tracker.meet", "arguments": {"name": "a"}},
                {"id": "call_b", "name": "tracker.meet", "arguments": {"name": "b"}},
            ]
        },
        {"text": "both met"},
    ]
    scripted_configuration("meet", turns, allowed_tools=["tracker.*"], tool_timeout_seconds=8)
    run = drive(staff, "meet")
    assert run.status == Run.Status.COMPLETED
    results = results_by_call(run.pk)
    assert (results["call_a"]["content"], results["call_b"]["content"]) == ("met a", "met b")
    assert {r["status"] for r in results.values()} == {ev.OK}


@pytest.mark.django_db
def test_mcp3_a_write_waits_for_approval_and_is_sent_once(live, staff):
    from tests.conftest import grant
    from tests.support.hitl import active_ticket, allow, client_for, resume

    approver = grant(staff, "approve_run")
    scripted_configuration(
        "writes",
        one_call("tracker.add_comment", {"ticket_id": "T-1", "text": "rollback"}),
        allowed_tools=["tracker.*"],
    )
    run = submit(approver, "writes")
    assert execute_run(run.pk) == Run.Status.AWAITING
    assert live.calls("add_comment") == []
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert live.calls("add_comment") == [{"ticket_id": "T-1", "text": "rollback"}]
    assert live.tracker.tickets["T-1"]["comments"][-1] == "rollback"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("point", "sent"),
    [
        pytest.param("effect_sent:1", 0, id="killed-after-the-watermark-before-the-request"),
        pytest.param("tool_done:1", 1, id="killed-between-the-request-and-its-result"),
    ],
)
def test_mcp3_tool4_a_write_is_never_sent_twice_across_a_worker_sigkill(live, staff, point, sent):
    """A worker process drives the run and is SIGKILLed at `point`; a second worker resumes
    it. The write's watermark was set, so it becomes `uncertain`: the model is told the
    outcome is unknown, and the server never receives it again."""
    scripted_configuration(
        "crash",
        one_call("tracker.add_comment", {"ticket_id": "T-1", "text": "once"}),
        allowed_tools=["tracker.*"],
        approval_exempt_tools=["tracker.add_comment"],
    )
    run = submit(staff, "crash")
    env = {"AGENTRUNS_MCP_ALLOWED_HOSTS": "127.0.0.1"}
    first = run_child(run.pk, faults=point, extra_env=env)
    assert first.killed, first
    assert len(live.calls("add_comment")) == sent
    invocation = ToolInvocation.objects.get(run=run)
    assert invocation.effect_sent_at is not None
    expire_lease(run.pk)
    second = run_child(run.pk, extra_env=env)
    assert second.returncode == 0, second
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    result = results_by_call(run.pk)["call_1"]
    assert result["status"] == ev.UNCERTAIN
    assert len(live.calls("add_comment")) == sent  # never re-sent
    invocation.refresh_from_db()
    assert invocation.status == ToolInvocation.Status.UNCERTAIN
