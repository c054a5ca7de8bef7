"""Tool calls (HITL-1, HITL-10, TOOL-3, TOOL-4): a turn's batch, the live gate at
execution, the effect watermark before an external effect, transactional tools inside
the step that records them."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.frozen import quick
from agentruns.models import Checkpoint, ToolInvocation
from agentruns.runtime import effects, faults
from agentruns.runtime.actions.base import Invocation, Items, Outcome, RunContext
from agentruns.runtime.actions.delegation import (
    budget_shares,
    child_starter,
    delegation_refusal,
)
from agentruns.runtime.actions.endings import boundary, park, park_delegations
from agentruns.runtime.actions.gating import assert_context
from agentruns.runtime.actions.replayed import answer_from_recording
from agentruns.runtime.redaction import redact
from agentruns.runtime.replay import recording_in
from agentruns.runtime.state import (
    ProposedCall,
    Turn,
)
from agentruns.runtime.storable import storable_output
from agentruns.store import store
from agentruns.store.connection import close_thread_connections, connection_given_back
from agentruns.store.records import Rows
from agentruns.store.rows import InvocationChange
from agentruns.tools.builtin import wait_due
from agentruns.tools.policy import (
    TIMER,
    needs_human,
    tool_refusal,
)
from agentruns.tools.registry import (
    DELEGATE_TOOL,
    REGISTRY,
    Tool,
    ToolContext,
    ToolOutput,
    digest,
)
from agentruns.tracing import end_span, span_ref

logger = logging.getLogger(__name__)


def call_tools(ctx: RunContext, turn: Turn, calls: Sequence[ProposedCall]) -> Outcome | None:
    """HITL-1: calls that need no person run now; then the first that needs one parks
    the run. Results reach the model only when the whole turn is answered. Calls that
    wait on something outside this process (an MCP server, the web) run together. A
    replay's calls run nothing: its original's recording answers them (GOV-4)."""
    recording = recording_in(ctx.events)
    if recording is not None:
        return answer_from_recording(ctx, turn, calls, recording)
    ctx.load_invocations(turn, calls)
    if any(turn.decisions.get(call.id) == ev.ALLOW for call in calls):
        # RG-1..RG-4: a resumed run re-gates before the approved call runs; if its
        # context may no longer be sent there is no point in acting on it.
        refused = assert_context(ctx)
        if refused:
            return refused
    waiting: list[ProposedCall] = []
    together: list[Ready] = []
    trace = ctx.trace
    spans: list[tuple[Any, ProposedCall]] = []  # OPS-7: the together calls' spans
    for call in calls:
        stopped = boundary(ctx)
        if stopped:
            return stopped
        if call.id not in turn.granted:
            _record_result(ctx, call, ev.REFUSED, "Refused: not granted for this turn.")
            continue
        tool = REGISTRY.get(call.name)
        human = needs_human(tool, ctx.config.exempt) if tool else None
        if human == TIMER and call.arguments is not None:
            due, problem = wait_due(call.arguments, timezone.now())
            if due is None:  # SCHED-3: no due time, nothing to wait for
                _record_result(
                    ctx,
                    call,
                    ev.ERROR,
                    f"Not waiting: {problem}",
                    invocation_status=ToolInvocation.Status.FAILED,
                )
                continue
        if human and turn.decisions.get(call.id) != ev.ALLOW:
            waiting.append(call)
            continue
        span = trace.tool(ctx, turn, call) if trace else None  # OPS-7
        ready = _ready(ctx, turn, call)
        if ready is not None and ready.tool.blocking and not ready.tool.transactional:
            together.append(ready)
            spans.append((span, call))
            continue
        if ready is not None:
            _execute(ctx, [ready])
        if trace:
            trace.tool_done(ctx, span, call)
    _execute(ctx, together)
    if trace:
        for span, call in spans:
            trace.tool_done(ctx, span, call)
    if waiting:
        return _wait(ctx, turn, waiting)
    return None


def _wait(ctx: RunContext, turn: Turn, waiting: Sequence[ProposedCall]) -> Outcome | None:
    """HITL-1: park on the first call that waits for a person. DEL-1: but first every
    delegation of the turn starts its child at once, the parent parking on all of them; a
    refused one is an error result and the turn goes on. Traced, each call has a span of
    its own, its child's run span's parent (DEL-5, OPS-7)."""
    delegations = [call for call in waiting if call.name == DELEGATE_TOOL]
    if not delegations:
        return park(ctx, waiting[0])
    allowed = []
    for call in delegations:
        refusal = delegation_refusal(ctx, call)
        if refusal:
            _record_result(
                ctx,
                call,
                ev.ERROR,
                f"Error: {refusal}.",
                invocation_status=ToolInvocation.Status.FAILED,
            )
        else:
            allowed.append(call)
    if not allowed:
        people = [call for call in waiting if call.name != DELEGATE_TOOL]
        return park(ctx, people[0]) if people else None
    spans = [ctx.trace.tool(ctx, turn, call) if ctx.trace else None for call in allowed]
    shares = budget_shares(ctx, len(allowed))
    try:
        return park_delegations(
            ctx,
            [
                (call, child_starter(ctx, call, share, span_ref(span) if span else None))
                for call, share, span in zip(allowed, shares, spans, strict=True)
            ],
        )
    finally:
        for span in spans:
            if span is not None:
                end_span(span, {"agentruns.tool.status": "delegated"})


@quick
@dataclass(frozen=True, slots=True)
class Ready:
    """A call that passed the live gate, with everything needed to run it."""

    call: ProposedCall
    tool: Tool
    context: ToolContext
    invocation: Invocation
    edited_by: str | None = None  # HITL-12: the approver who changed its arguments


def _ready(ctx: RunContext, turn: Turn, call: ProposedCall) -> Ready | None:
    """The call, ready to run; None once a result that ends it is recorded (not
    permitted, or TOOL-4's uncertain write)."""
    tool = REGISTRY.get(call.name)
    invocation = ctx.invocations.get(call.id)
    problem = _live_gate(ctx, call, tool, invocation, turn.decisions.get(call.id) == ev.ALLOW)
    if problem or tool is None or invocation is None:
        _record_result(
            ctx,
            call,
            ev.NOT_PERMITTED,
            f"Not permitted: {problem or 'this call is no longer permitted'}.",
            invocation_status=ToolInvocation.Status.NOT_PERMITTED,
        )
        return None
    if effects.uncertain(tool, invocation.effect_sent_at):
        _record_uncertain(ctx, call)
        return None
    context = ToolContext(
        run_id=ctx.lease.run_id,
        thread_id=ctx.lease.thread_id,
        turn_index=turn.turn_index,
        call_id=call.id,
        configuration_id=ctx.lease.configuration_id,
        catalog=ctx.mode.deferred,
        active=tuple(sorted(ctx.active_deferred())),
        timeout_seconds=ctx.config.tool_timeout_seconds,
    )
    return Ready(call, tool, context, invocation, turn.edited.get(call.id))


def _execute(ctx: RunContext, batch: Sequence[Ready]) -> None:
    """TOOL-4 (runtime/effects.py): a transactional tool inside the step that records
    it; any other write behind its watermark, committed (for the whole batch at once)
    just before the effects. Two or more calls of a batch run at the same time; each result
    is recorded as it comes back (the model still reads them in model order, LOOP-7)."""
    if not batch:
        return
    if len(batch) == 1 and batch[0].tool.transactional:
        _run_transactional(ctx, batch[0])
        return
    writes = [ready.invocation for ready in batch if effects.watermarked(ready.tool)]
    if writes:
        _mark_effect_sent(ctx, writes)
    if any(ready.tool.blocking for ready in batch):
        with connection_given_back():  # they wait on something outside this process
            _run(ctx, batch)
    else:
        _run(ctx, batch)


def _run(ctx: RunContext, batch: Sequence[Ready]) -> None:
    if len(batch) == 1:
        _finished(ctx, batch[0], run_tool(batch[0].tool, batch[0].call, batch[0].context))
        return
    with ThreadPoolExecutor(max_workers=min(len(batch), MAX_TOGETHER)) as pool:
        running = {pool.submit(_run_apart, ready): ready for ready in batch}
        for future in as_completed(running):
            _finished(ctx, running[future], future.result())


MAX_TOGETHER = 8


def _run_apart(ready: Ready) -> ToolOutput:
    """On a pool thread: the tool, then that thread's connections given back."""
    try:
        return run_tool(ready.tool, ready.call, ready.context)
    finally:
        close_thread_connections()


def _finished(ctx: RunContext, ready: Ready, output: ToolOutput) -> None:
    faults.fault_point(faults.TOOL_DONE)
    unknown = effects.outcome_unknown(ready.tool, output)
    if unknown is not None:
        content, _ = redact(unknown)
        _record_result(
            ctx,
            ready.call,
            ev.UNCERTAIN,
            content,
            invocation_status=ToolInvocation.Status.UNCERTAIN,
        )
        return
    _record_output(ctx, ready, output, redoable=effects.redoable(ready.tool))


def _live_gate(
    ctx: RunContext,
    call: ProposedCall,
    tool: Tool | None,
    invocation: Invocation | None,
    approved: bool,
) -> str:
    """HITL-10: at execution the live configuration must still grant this exact tool,
    and an approval covers only the exact call its ticket showed (HITL-5)."""
    refusal = tool_refusal(call.name, granted=ctx.config.granted, ceiling=ctx.config.ceiling)
    if refusal:
        return refusal[1].rstrip(".")
    if tool and invocation and invocation.tool_version != tool.version:
        return f"{call.name!r} changed version since it was approved"
    if approved:
        shown = store().approval_shown(ctx.lease.run_id, call.id)
        if shown != (call.name, digest(call.arguments)):
            return "the approval does not match this exact call"
    return ""


def _run_transactional(ctx: RunContext, ready: Ready) -> None:
    """TOOL-4: the effect and the record of its result commit together or not at all."""
    with transaction.atomic():
        output = run_tool(ready.tool, ready.call, ready.context, savepoint=True)
        written = ctx.write(
            _output_items(ready, output),
            checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
            rows=Rows(invocation_updates=[completion(ready.invocation.pk, output)]),
        )
    ctx.committed(written)


def _mark_effect_sent(ctx: RunContext, invocations: Sequence[Invocation]) -> None:
    now = timezone.now()
    sent = effects.watermark([i.pk for i in invocations], now)
    ctx.commit([], rows=Rows(invocation_updates=sent))
    for invocation in invocations:
        invocation.effect_sent_at = now
    faults.fault_point(faults.EFFECT_SENT)


def _record_uncertain(ctx: RunContext, call: ProposedCall) -> None:
    _record_result(
        ctx, call, ev.UNCERTAIN, effects.UNKNOWN, invocation_status=ToolInvocation.Status.UNCERTAIN
    )


def _output_items(ready: Ready, output: ToolOutput) -> Items:
    """The result, with its tool's class as it ran: the class it keeps in later sends
    should the tool stop being registered (MCP-4). A call an approver edited says so
    first, with what ran, so the model does not take its own arguments for it (HITL-12)."""
    call, tool = ready.call, ready.tool
    content, redacted = redact(_edited_note(ready) + output.content)
    status = ev.OK if output.ok else ev.ERROR
    added = output.data.get("added_tool_names") if output.ok else None
    return [
        *ev.redacted(f"tool:{call.name}", redacted),
        ev.result_item(
            call.id,
            call.name,
            status,
            content,
            data_class=tool.output_class.label,
            added_tool_names=None if added is None else list(added),
        ),
    ]


def _edited_note(ready: Ready) -> str:
    if ready.edited_by is None:
        return ""
    who = f"The approver {ready.edited_by}" if ready.edited_by else "An approver"
    ran = json.dumps(ready.call.arguments, ensure_ascii=False, sort_keys=True)
    return f"[{who} changed the arguments before approving; the call ran with {ran}.]\n"


def _record_output(ctx: RunContext, ready: Ready, output: ToolOutput, *, redoable: bool) -> None:
    """A write's result is durable at once; a result that could be had again by running
    the call again is held for the next write (the audit before the next send)."""
    ctx.commit(
        _output_items(ready, output),
        checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
        rows=Rows(invocation_updates=[completion(ready.invocation.pk, output)]),
        durable=not redoable,
        hold=redoable,
    )


def _record_result(
    ctx: RunContext,
    call: ProposedCall,
    status: str,
    content: str,
    *,
    invocation_status: str | None = None,
) -> None:
    invocation = ctx.invocations.get(call.id)
    updates = []
    if invocation and invocation_status:
        updates.append(InvocationChange(invocation.pk, invocation_status, timezone.now()))
    ctx.commit(
        [ev.result_item(call.id, call.name, status, content)],
        checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
        rows=Rows(invocation_updates=updates),
    )


def completion(pk: int, output: ToolOutput) -> InvocationChange:
    return InvocationChange(
        pk,
        ToolInvocation.Status.COMPLETED if output.ok else ToolInvocation.Status.FAILED,
        completed_at=timezone.now(),
        result={"ok": output.ok, "data": output.data},
    )


def run_tool(
    tool: Tool, call: ProposedCall, context: ToolContext, *, savepoint: bool = False
) -> ToolOutput:
    """A failing tool is a model-visible error result, never a crashed run. Inside a
    transaction it runs in a savepoint, so its failure leaves the step's writes usable."""
    try:
        if savepoint:
            with transaction.atomic():
                output = tool.execute(call.arguments or {}, context)
        else:
            output = tool.execute(call.arguments or {}, context)
    except Exception as exc:
        logger.exception("tool %s failed in run %s", tool.name, context.run_id)
        output = ToolOutput(f"Error: the tool failed ({type(exc).__name__}: {exc}).", ok=False)
    return storable_output(output)  # SEC-7: what a tool returns is hostile too
