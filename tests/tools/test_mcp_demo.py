"""MCP-5: the demo needs no key. Its data registers the demo's own MCP server (the ticket
tracker `manage.py serve` starts) with its tools pinned and declared, `mcp-demo` (a local
provider) uses all three, and `mcp-demo-global` (a global provider) is refused the
restricted lookup (TOOL-2). A parked mcp-demo run re-pointed at the global provider sends
the restricted result withheld (MCP-4). Here the tracker is the demo's code served on a
free loopback port (serve_http) and the runs are driven in-process."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.demo import load_demo_data, load_demo_users
from agentruns.demo_mcp import build_tracker
from agentruns.models import Configuration, Event, GateAudit, McpTool, Provider, Run
from agentruns.runtime.loop import execute_run
from agentruns.selectors import configuration_readout
from tests.conftest import grant
from tests.support.hitl import active_ticket, allow, client_for, results_by_call, resume
from tests.support.mcp import serve_http
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, django_user_model):
    with serve_http(build_tracker()) as url:
        settings.AGENTRUNS_DEMO_MCP_URL = url  # where serve would run it; exempt (SEC-9)
        settings.AGENTRUNS_MCP_ALLOWED_HOSTS = []
        load_demo_data()
        load_demo_users()
        yield grant(django_user_model.objects.get(username="admin"), "approve_run")


def test_mcp5_the_demo_data_pins_the_trackers_tools_with_their_declared_classes(demo):
    declared = {
        tool.name: (tool.declared_class, tool.declared_effect)
        for tool in McpTool.objects.filter(server__slug="tracker")
    }
    assert declared == {
        "get_ticket": ("internal", "read_only"),
        "add_comment": ("internal", "write"),
        "customer_lookup": ("restricted", "read_only"),
    }
    local = configuration_readout(configuration=Configuration.objects.get(slug="mcp-demo"))
    assert {t["name"]: t["over_ceiling"] for t in local["tools"]} == {
        "tracker.add_comment": False,
        "tracker.customer_lookup": False,
        "tracker.get_ticket": False,
    }
    far = configuration_readout(configuration=Configuration.objects.get(slug="mcp-demo-global"))
    assert {t["name"] for t in far["tools"] if t["over_ceiling"]} == {"tracker.customer_lookup"}
    # What a call waits for: the write an approval (TOOL-5); the reads nothing.
    assert {t["name"]: t["waits_for"] for t in local["tools"]} == {
        "tracker.add_comment": "approval",
        "tracker.customer_lookup": "",
        "tracker.get_ticket": "",
    }
    load_demo_data()  # safe to run again
    assert McpTool.objects.filter(server__slug="tracker").count() == 3


def test_mcp5_mcp_demo_calls_the_tracker_and_waits_for_approval_of_the_write(demo):
    run = submit(demo, "mcp-demo", "Triage T-1")
    assert execute_run(run.pk) == Run.Status.AWAITING
    results = {r["tool"]: r for r in results_by_call(run.pk).values()}
    assert "Checkout page times out" in results["tracker.get_ticket"]["content"]
    assert "J. Doe" in results["tracker.customer_lookup"]["content"]
    assert active_ticket(run.pk).tool == "tracker.add_comment"
    assert resume(client_for(demo), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.COMPLETED
    results = {r["tool"]: r for r in results_by_call(run.pk).values()}
    assert results["tracker.add_comment"]["content"] == "Comment added to T-1."


def test_mcp5_tool2_mcp_demo_global_is_refused_the_restricted_lookup(demo):
    run = submit(demo, "mcp-demo-global", "Triage T-1")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    results = {r["tool"]: r for r in results_by_call(run.pk).values()}
    assert results["tracker.customer_lookup"]["status"] == ev.REFUSED
    assert "restricted" in results["tracker.customer_lookup"]["content"]
    assert results["tracker.get_ticket"]["status"] == ev.OK


def test_mcp5_cg12_a_parked_mcp_demo_run_repointed_global_is_refused_naming_the_reply(demo):
    """The comment the run waits to write was proposed by a reply that read the customer
    record: that reply carries its class (CG-12), so once the configuration is re-pointed
    at a global provider the next send is refused naming it — not only the record withheld."""
    run = submit(demo, "mcp-demo", "Triage T-1")
    assert execute_run(run.pk) == Run.Status.AWAITING
    configuration = Configuration.objects.get(slug="mcp-demo")
    configuration.provider = Provider.objects.get(slug="global-scripted")
    configuration.save()
    assert resume(client_for(demo), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.FAILED
    failure = Run.objects.get(pk=run.pk).failure
    assert (failure["source_kind"], failure["source_name"]) == ("reply", "turn 2")
    assert failure["origin"] == {"kind": "tool_result", "name": "tracker.customer_lookup"}
    assert "J. Doe" not in str(failure)


def test_mcp5_cg13_mcp_demo_forked_onto_mcp_demo_global_is_refused_naming_the_reply(demo):
    """The demo of CG-12/CG-13: the finished run's replies quoted the restricted record, so
    a fork onto the global configuration is refused, naming the reply that did."""
    run = submit(demo, "mcp-demo", "Triage T-1")
    assert execute_run(run.pk) == Run.Status.AWAITING
    assert resume(client_for(demo), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.COMPLETED
    body = {"configuration": "mcp-demo-global", "input": "Summarise for the customer"}
    response = client_for(demo).post(f"/api/runs/{run.pk}/fork/", body, format="json")
    assert response.status_code == 201, response.content
    assert execute_run(response.json()["id"]) == Run.Status.FAILED
    failure = Run.objects.get(pk=response.json()["id"]).failure
    assert (failure["code"], failure["source_name"]) == ("context_refused", "turn 3")
    assert failure["detail"].startswith(
        'Configuration "mcp-demo-global" may not send this context: reply of turn 3 (set by '
        'tool result "tracker.customer_lookup", restricted)'
    )


def test_mcp5_mcp4_a_fork_of_mcp_demo_at_its_reads_onto_the_global_one_withholds_the_lookup(
    demo,
):
    """Forked at the turn that asked for the reads, no reply has read the record yet: the
    fork's send carries it withheld (MCP-4), and goes."""
    run = submit(demo, "mcp-demo", "Triage T-1")
    assert execute_run(run.pk) == Run.Status.AWAITING
    at = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")[0].sequence
    body = {"configuration": "mcp-demo-global", "at": at}
    response = client_for(demo).post(f"/api/runs/{run.pk}/fork/", body, format="json")
    assert response.status_code == 201, response.content
    forked = response.json()["id"]
    assert execute_run(forked) == Run.Status.COMPLETED
    audit = GateAudit.objects.get(run_id=forked, source_kind="tool_result")
    assert (audit.source_name, audit.data_class, audit.zone) == (
        "tracker.customer_lookup",
        "restricted",
        "external_global",
    )
