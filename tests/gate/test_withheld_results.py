"""MCP-4: a tool result is a source of every later send, with its tool's live class. A
restricted result a local provider received is withheld from the sends that may not take
it: when the parked run's configuration is re-pointed at an external_global provider,
and when the tool's declared class is raised while the run waits. The send carries a
"withheld by the context gate" result in place of the original (naming tool and class,
pairing intact: the fake provider is as strict as the real APIs), a `gate.refused` audit
row is written, and the original stays in the log. One rule for MCP and built-in tools:
each case runs with both. What reached the model is read from the fake's requests."""

from __future__ import annotations

import dataclasses

import pytest

from agentruns import events as ev
from agentruns.classes import DataClass
from agentruns.events import LogEntry
from agentruns.gate.core import SUMMARY, TOOL_RESULT, withheld
from agentruns.models import Configuration, Event, GateAudit, McpTool, Run
from agentruns.runtime.compose import log_view, result_sources, withhold
from agentruns.runtime.context import pairing_problems, project
from agentruns.runtime.loop import execute_run
from agentruns.selectors import configuration_readout, run_readout
from agentruns.services.mcp import mcp_tool_declare
from agentruns.tools.registry import REGISTRY
from tests.conftest import grant
from tests.support.catalog import KEY, KEY_ENV, make_provider, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import (
    active_ticket,
    allow,
    client_for,
    results_by_call,
    resume,
    tool_messages,
)
from tests.support.mcp import make_tracker, pin, register, serve_http
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

NOTE = "Withheld by the context gate"


@dataclasses.dataclass(frozen=True)
class Case:
    """A read whose result is restricted, and a write that parks the run after it."""

    read: str
    read_wire: str
    read_arguments: dict
    write: str
    write_wire: str
    write_arguments: dict
    needle: str  # a word of the read's result that must never reach a zone it may not

    @property
    def allowed(self) -> list[str]:
        return [self.read.split(".")[0], self.write.split(".")[0]]


MCP = Case(
    "tracker.customer_lookup",
    "tracker_customer_lookup",
    {"customer_id": "C-4411"},
    "tracker.add_comment",
    "tracker_add_comment",
    {"ticket_id": "T-1", "text": "called the customer"},
    "j.doe@example.com",
)
BUILT_IN = Case(
    "vault.customer_lookup",
    "vault_customer_lookup",
    {"customer": "C-4411"},
    "notes.write",
    "notes_write",
    {"title": "call", "body": "called the customer"},
    "J. Doe",
)


def script(case: Case):
    def reply(body, path):
        answered = len(tool_messages(body))
        if answered == 0:
            return {
                "tool_calls": [
                    {"id": "call_r", "name": case.read_wire, "arguments": case.read_arguments}
                ]
            }
        if answered == 1:
            return {
                "tool_calls": [
                    {"id": "call_w", "name": case.write_wire, "arguments": case.write_arguments}
                ]
            }
        return {"text": "done"}

    return reply


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


@pytest.fixture
def tracker(settings):
    settings.AGENTRUNS_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    live = make_tracker()
    with serve_http(live.server) as url:
        server = pin(register("tracker", url))
        declared = {"customer_lookup": ("restricted", "read_only"), "add_comment": ("internal", "")}
        for tool in McpTool.objects.filter(server=server, name__in=declared):
            mcp_tool_declare(
                tool=tool,
                output_class=declared[tool.name][0],
                effect=declared[tool.name][1],
                user=None,
            )
        yield live


@pytest.fixture(params=[MCP, BUILT_IN], ids=["mcp-tool", "built-in-tool"])
def case(request):
    if request.param is MCP:
        request.getfixturevalue("tracker")
    return request.param


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


def parked(approver, fake, case: Case, zone: str) -> Run:
    fake.default = script(case)
    openai_configuration("lookup", fake, zone=zone, allowed_tools=case.allowed)
    run = submit(approver, "lookup")
    assert execute_run(run.pk) == Run.Status.AWAITING, run_failure(run)
    assert results_by_call(run.pk)["call_r"]["status"] == ev.OK
    return run


def run_failure(run):
    run.refresh_from_db()
    return run.failure


def approve_and_finish(approver, run: Run) -> Run:
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.COMPLETED, run_failure(run)
    run.refresh_from_db()
    return run


def repoint(fake, zone: str) -> None:
    """Staff point the configuration at another provider of the same endpoint."""
    provider = make_provider(
        f"lookup-{zone}",
        zone=zone,
        kind="openai",
        base_url=fake.openai_base_url,
        api_key_env=KEY_ENV,
    )
    configuration = Configuration.objects.get(slug="lookup")
    configuration.provider = provider
    configuration.save()


def sent_result(fake, call_id: str) -> dict:
    [message] = [m for m in tool_messages(fake.requests[-1].body) if m["tool_call_id"] == call_id]
    return message


def assert_withheld(fake, run: Run, case: Case, *, data_class: str, ceiling: str, zone: str):
    message = sent_result(fake, "call_r")
    assert message["content"].startswith(
        f"{NOTE}: the result of {case.read} is classed {data_class}, above the ceiling {ceiling}"
    )
    assert case.needle not in str(fake.requests[-1].body)
    # The original stays in the log.
    assert case.needle in results_by_call(run.pk)["call_r"]["content"]
    audit = GateAudit.objects.filter(run_id=run.pk, source_kind=TOOL_RESULT).order_by("id")
    assert [(a.verdict, a.source_name, a.data_class, a.zone, a.ceiling) for a in audit] == [
        ("refused", case.read, data_class, zone, ceiling)
    ]


def test_mcp4_cg12_a_reply_that_read_the_result_is_refused_when_the_configuration_is_repointed(
    approver, fake, case
):
    """The write was proposed by a reply that read the restricted result: that reply
    carries the result's class (CG-12), so the send after the repoint is refused, naming
    it, where the result alone would only have been withheld."""
    run = parked(approver, fake, case, zone="local")
    # While local, the result went out as it is.
    assert case.needle in sent_result(fake, "call_r")["content"]
    sent = len(fake.requests)
    repoint(fake, "external_global")
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == Run.Status.FAILED
    failure = run_failure(run)
    assert (failure["source_kind"], failure["source_name"]) == ("reply", "turn 2")
    assert failure["origin"] == {"kind": TOOL_RESULT, "name": case.read}
    assert len(fake.requests) == sent  # nothing went out after the repoint


def test_mcp4_a_result_is_withheld_when_its_tools_class_is_raised_while_the_run_waits(
    approver, fake, case, monkeypatch
):
    """On an EU provider (ceiling confidential) the read, classed internal, is sent; its
    class is raised to restricted while the run waits for the write's approval."""
    if case is MCP:
        tool = McpTool.objects.get(server__slug="tracker", name="customer_lookup")
        mcp_tool_declare(tool=tool, output_class="internal", effect="read_only", user=None)
    else:
        lowered = dataclasses.replace(REGISTRY.get(case.read), output_class=DataClass.INTERNAL)
        monkeypatch.setitem(REGISTRY._tools, case.read, lowered)
    run = parked(approver, fake, case, zone="external_eu")
    assert case.needle in sent_result(fake, "call_r")["content"]
    if case is MCP:
        mcp_tool_declare(tool=tool, output_class="restricted", effect="read_only", user=None)
    else:  # a class is code: a deploy raises it
        raised = dataclasses.replace(lowered, output_class=DataClass.RESTRICTED)
        monkeypatch.setitem(REGISTRY._tools, case.read, raised)
    run = approve_and_finish(approver, run)
    assert_withheld(
        fake, run, case, data_class="restricted", ceiling="confidential", zone="external_eu"
    )


def test_mcp4_the_readout_lists_granted_tools_with_classes_and_the_runs_withheld_results(
    approver, fake, case
):
    run = parked(approver, fake, case, zone="local")
    repoint(fake, "external_global")
    readout = run_readout(Run.objects.get(pk=run.pk))
    rows = {t["name"]: t for t in readout["tools"]}
    assert rows[case.read]["data_class"] == "restricted"
    assert rows[case.read]["over_ceiling"] is True  # TOOL-2 refuses a new call
    assert rows[case.write]["over_ceiling"] is False
    assert [(w["tool"], w["data_class"]) for w in readout["withheld"]] == [
        (case.read, "restricted")
    ]
    configuration = Configuration.objects.get(slug="lookup")
    assert {t["name"] for t in configuration_readout(configuration=configuration)["tools"]} >= {
        case.read,
        case.write,
    }


def test_mcp4_cg10_a_carried_result_sets_the_runs_effective_class_when_it_is_the_strictest(
    approver, fake, case
):
    """A parked run on a local provider carries its restricted read to the next send: the
    readout's effective class says restricted, set by that tool's result — not undeclared
    (the run's configuration declares no sources) — through the reply that read it (CG-12,
    on a tie the reply is named). Withheld, the result no longer sets it; the reply still
    does, and the next send is refused."""
    run = parked(approver, fake, case, zone="local")
    readout = run_readout(Run.objects.get(pk=run.pk))
    assert readout["effective_class"] == "restricted"
    assert readout["effective_source"] == {
        "kind": "reply",
        "name": "turn 2",
        "forced": False,
        "origin": {"kind": TOOL_RESULT, "name": case.read},
    }
    assert readout["withheld"] == []
    repoint(fake, "external_global")
    readout = run_readout(Run.objects.get(pk=run.pk))
    assert [w["tool"] for w in readout["withheld"]] == [case.read]
    assert (readout["effective_class"], readout["verdict"]) == ("restricted", "refused")
    assert 'reply of turn 2 (set by tool result "' in readout["message"]


def test_mcp4_cg6_an_observing_gate_withholds_nothing_and_audits_it_observed(
    approver, fake, settings
):
    run = parked(approver, fake, BUILT_IN, zone="local")
    repoint(fake, "external_global")
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "observe"
    approve_and_finish(approver, run)
    assert BUILT_IN.needle in sent_result(fake, "call_r")["content"]
    audit = GateAudit.objects.get(run_id=run.pk, source_kind=TOOL_RESULT)
    assert (audit.verdict, audit.enforcement) == ("refused", "observed")


# ------------------------------------------------------------------- the rule, pure


def entry(sequence: int, kind: str, **payload) -> LogEntry:
    return LogEntry(sequence, kind, payload, 1)


LOG = [
    entry(1, ev.USER, text="who is C-1?"),
    entry(
        2,
        ev.ASSISTANT,
        text="",
        tool_calls=[
            {"id": "c1", "name": "vault.customer_lookup", "arguments": {}},
            {"id": "c2", "name": "clock.now", "arguments": {}},
        ],
    ),
    entry(
        3,
        ev.TOOL_RESULT,
        call_id="c1",
        tool="vault.customer_lookup",
        status="ok",
        content="C-1: J. Doe",
    ),
    entry(4, ev.TOOL_RESULT, call_id="c2", tool="clock.now", status="ok", content="noon"),
]


def test_mcp4_withholding_replaces_only_what_is_over_the_ceiling_and_keeps_the_pairing():
    from agentruns.classes import Zone

    over = withheld(result_sources(LOG), Zone.EXTERNAL_GLOBAL.ceiling)
    assert [(r.sequence, r.tool, r.data_class) for r in over] == [
        (3, "vault.customer_lookup", DataClass.RESTRICTED)
    ]
    sent = withhold(LOG, over, Zone.EXTERNAL_GLOBAL)
    messages = project(sent)
    assert pairing_problems(messages) == []
    contents = [getattr(m, "content", None) for m in messages]
    assert contents[2].startswith(
        f"{NOTE}: the result of vault.customer_lookup is classed restricted"
    )
    assert contents[3] == "noon"
    assert messages[2].is_error
    assert LOG[2].payload["content"] == "C-1: J. Doe"  # the log itself is untouched
    assert withheld(result_sources(LOG), Zone.PRIVATE_HOSTED.ceiling) == ()


def test_mcp4_a_tool_no_longer_registered_keeps_the_class_its_result_was_recorded_with():
    gone = [
        entry(
            3,
            ev.TOOL_RESULT,
            call_id="c1",
            tool="removed.lookup",
            status="ok",
            content="x",
            **{"class": "secret"},
        )
    ]
    [source] = result_sources(gone)
    assert source.data_class is DataClass.SECRET
    # The loop's own refusals carry no tool output and are never sources.
    refused = [
        entry(
            3,
            ev.TOOL_RESULT,
            call_id="c1",
            tool="vault.customer_lookup",
            status="refused",
            content="Refused",
        )
    ]
    assert result_sources(refused) == []


def test_mcp4_a_summary_keeps_the_class_of_the_results_it_summarised():
    from agentruns.classes import Zone

    compacted = [
        entry(
            5,
            ev.COMPACTION,
            summary="J. Doe called about checkout",
            kept_from=6,
            results={"vault.customer_lookup": "restricted", "clock.now": "public"},
        ),
        entry(6, ev.USER, text="and now?"),
    ]
    [source] = result_sources(compacted)
    assert (source.kind, source.tool, source.data_class) == (
        SUMMARY,
        "vault.customer_lookup",
        DataClass.RESTRICTED,
    )
    sent = withhold(compacted, (source,), Zone.EXTERNAL_EU)
    assert "J. Doe" not in project(sent)[0].text
    assert project(sent)[0].text.endswith("It stays in the run's log.")


def test_mcp4_the_loops_view_withholds_against_the_live_configuration(approver, fake):
    """`log_view` is the one recipe: the dry run, the inspector and the loop agree."""
    from agentruns.runtime.config import build_runtime_config

    run = parked(approver, fake, BUILT_IN, zone="local")
    repoint(fake, "external_global")
    config = build_runtime_config(Configuration.objects.get(slug="lookup"))
    from agentruns.selectors import thread_log

    view = log_view(thread_log(run), config)
    assert [r.tool for r in view.withheld] == ["vault.customer_lookup"]
    assert view.ceiling is DataClass.INTERNAL


def test_mcp4_fork1_a_fork_onto_a_less_trusted_configuration_withholds_the_copied_result(
    approver, fake, case
):
    """A fork is a send like any other: a restricted result copied from a run on a local
    provider reaches a fork on an external_global one only as the gate's note."""

    def reply(body, path):
        return (
            {"text": "done"}
            if tool_messages(body)
            else {
                "tool_calls": [
                    {"id": "call_r", "name": case.read_wire, "arguments": case.read_arguments}
                ]
            }
        )

    fake.default = reply
    openai_configuration("lookup", fake, zone="local", allowed_tools=case.allowed)
    openai_configuration("lookup-abroad", fake, zone="external_global", allowed_tools=case.allowed)
    run = submit(approver, "lookup")
    assert execute_run(run.pk) == Run.Status.COMPLETED, run_failure(run)
    assert case.needle in sent_result(fake, "call_r")["content"]
    # At the turn that asked for the read: the copy holds no reply that read it (CG-12).
    at = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")[0].sequence
    response = client_for(approver).post(
        f"/api/runs/{run.pk}/fork/",
        {"configuration": "lookup-abroad", "at": at},
        format="json",
    )
    assert response.status_code == 201, response.content
    forked = Run.objects.get(pk=response.json()["id"])
    assert execute_run(forked.pk) == Run.Status.COMPLETED, run_failure(forked)
    message = sent_result(fake, "call_r")
    assert message["content"].startswith(
        f"{NOTE}: the result of {case.read} is classed restricted, above the ceiling internal"
    )
    assert case.needle not in str(fake.requests[-1].body)
    assert case.needle in results_by_call(run.pk)["call_r"]["content"]  # the original's log
    audit = GateAudit.objects.filter(run_id=forked.pk, source_kind=TOOL_RESULT)
    assert [(a.verdict, a.source_name, a.zone) for a in audit] == [
        ("refused", case.read, "external_global")
    ]
