"""GOV-4: a replay's tool calls, answered from its original's recording.

Instead of `call_tools` (nothing executes, no call waits for a person, no ticket opens,
no child run starts), each call the turn granted gets the original's result of the same
tool with the same arguments, or an error saying the original never made it. The
results keep the class they were produced under, so the replay's later sends are gated
as the original's were (CG-12, MCP-4). Everything else — the model turns, the gate
before each send, the budget, the endings — is the loop's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils import timezone

from agentruns import events as ev
from agentruns.models import Checkpoint, ToolInvocation
from agentruns.runtime.actions.base import Outcome, RunContext
from agentruns.runtime.actions.endings import boundary
from agentruns.runtime.replay import answer, not_recorded
from agentruns.runtime.state import ProposedCall, Turn
from agentruns.store.records import Rows
from agentruns.store.rows import InvocationChange


def answer_from_recording(
    ctx: RunContext, turn: Turn, calls: Sequence[ProposedCall], replayed: ev.RunReplayed
) -> Outcome | None:
    ctx.load_invocations(turn, calls)
    for call in calls:
        stopped = boundary(ctx)
        if stopped:
            return stopped
        if call.id not in turn.granted:
            refused = ev.ToolResult(
                call.id, call.name, ev.REFUSED, "Refused: not granted for this turn."
            )
            _record(ctx, refused)
            continue
        found = answer(replayed, call, ctx.events, ctx.lease.run_id)
        if found is None:
            missing = not_recorded(replayed.original, call.name)
            _record(ctx, ev.ToolResult(call.id, call.name, ev.ERROR, missing))
            continue
        _record(
            ctx,
            ev.ToolResult(
                call.id,
                call.name,
                found.status,
                found.content,
                found.data_class,
                found.added_tool_names,
            ),
        )
    return None


def _record(ctx: RunContext, result: ev.ToolResult) -> None:
    invocation = ctx.invocations.get(result.call_id)
    status = (
        ToolInvocation.Status.COMPLETED if result.status == ev.OK else ToolInvocation.Status.FAILED
    )
    updates = [InvocationChange(invocation.pk, status, timezone.now())] if invocation else []
    ctx.commit(
        [result.item()],
        checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
        rows=Rows(invocation_updates=updates),
    )
