"""How a side effect happens once (TOOL-3, TOOL-4, INT-3, HITL-11): the one module that
says it, as functions over typed values; the executor (runtime/actions/tool_calls.py)
and the endings follow it step by step:

1. *key*: every authorised call gets an idempotency key from what the call is, never
   from which attempt runs it (`idempotency_key`), unique in the invocation table;
2. *check*: a write whose effect was marked sent and whose result was never recorded may
   have happened: it is never run again, its result says so (`uncertain`, `UNKNOWN`);
3. *watermark*: before an external write runs, its `effect_sent_at` is committed
   (`watermarked`, `watermark`); a transactional tool instead runs inside the step that
   records its result, so effect and record commit together or not at all;
4. *run*, then *record*: a result that could be had again by running the call again
   (`redoable`) may be held for the next write; a write's is durable at once; a tool
   that cannot tell whether it acted says "outcome unknown" (`outcome_unknown`);
5. *close*: a run that ends early gives each open call a result, uncertain where its
   effect was sent (`close_open_calls`), so nothing looks in flight and the thread stays
   usable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from agentruns import events as ev
from agentruns.models import ToolInvocation
from agentruns.runtime.state import ProposedCall
from agentruns.store.rows import InvocationChange
from agentruns.tools.registry import Effect, Tool, ToolOutput, digest

Status = ToolInvocation.Status

UNKNOWN = (
    "Outcome unknown: the effect may have happened before the worker stopped. It will not "
    "be repeated automatically; an approver has been shown this call."
)
INTERRUPTED = "Interrupted: the run ended before this call ran."


def idempotency_key(
    run_id: int,
    turn_index: int,
    call: ProposedCall,
    tool: Tool | None,
    *,
    arguments_digest: str | None = None,
) -> str:
    """TOOL-3: from what the call *is*, never from which attempt runs it
    (`arguments_digest`: `digest(call.arguments)` when the caller has it already)."""
    version = tool.version if tool else ""
    if arguments_digest is None:
        arguments_digest = digest(call.arguments)
    return digest([run_id, turn_index, call.id, call.name, version, arguments_digest])


def watermarked(tool: Tool) -> bool:
    """TOOL-4: an external write, whose `effect_sent_at` is committed before it runs."""
    return tool.effect is Effect.WRITE and not tool.transactional


def uncertain(tool: Tool, effect_sent_at: datetime | None) -> bool:
    """TOOL-4: the write was sent by an attempt that never recorded its result."""
    return watermarked(tool) and effect_sent_at is not None


def watermark(pks: Sequence[int], now: datetime) -> list[InvocationChange]:
    """The invocation rows of a batch's external writes, marked sent and executing."""
    return [InvocationChange(pk, Status.EXECUTING, effect_sent_at=now) for pk in pks]


def redoable(tool: Tool) -> bool:
    """A result that running the call again would give again (no write): its record may
    wait for the next durable write (runtime/journal.py's held steps)."""
    return tool.effect is not Effect.WRITE


def outcome_unknown(tool: Tool, output: ToolOutput) -> str | None:
    """INT-3, TOOL-4: what a tool that may have acted but cannot tell says, so the model
    does not take "error" for "did not happen" and retry; None when it could not have
    acted (read-only) or knows."""
    if not output.uncertain or tool.effect is Effect.READ_ONLY:
        return None
    return (
        f"Outcome unknown: {output.content.removeprefix('Error: ')} The call may have "
        "taken effect; it will not be repeated automatically, and an approver has "
        "been shown it."
    )


def close_open_calls(
    calls: Sequence[ProposedCall], invocations: Mapping[str, tuple[int, bool]], now: datetime
) -> tuple[list[ev.Item], list[InvocationChange]]:
    """A result for each open call of a run that ends early (a failure, a cancel,
    HITL-11), uncertain if its effect may have happened, else an interruption; and the
    final status of each one's invocation row. `invocations` maps a call id to (its row
    id, whether its effect was sent). The loop's endings write them as a fenced step,
    cancelling a parked run (services/runs.py) as an append."""
    items: list[ev.Item] = []
    updates: list[InvocationChange] = []
    for call in calls:
        row, sent = invocations.get(call.id, (None, False))
        if sent:
            items.append(ev.result_item(call.id, call.name, ev.UNCERTAIN, UNKNOWN))
        else:
            items.append(ev.result_item(call.id, call.name, ev.ERROR, INTERRUPTED))
        if row is not None:
            status = Status.UNCERTAIN if sent else Status.INTERRUPTED
            updates.append(InvocationChange(row, status, completed_at=now))
    return items, updates
