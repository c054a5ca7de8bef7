"""GOV-4: a replay's log and its recording, pure functions of its original's log.

A replay re-runs a finished run's recorded task on a candidate configuration. Its thread
starts as a fork would (FORK-1's copy, `runtime/fork.py`) at the point just before the
original's first model turn: the thread's history before the run, then the run's own
opening (its prompt, its mode) as the replay's own events, so the loop asks the
candidate's model first. The opening `run.replayed` event carries the **recording**:
each tool result of the original with its call's tool name and arguments (by digest).
The loop answers every call of the replay from it (`runtime/actions/replayed.py`):
nothing executes, nothing waits for a person.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.runtime.compose import thread_mode
from agentruns.runtime.context import effective_events
from agentruns.runtime.fork import CONTEXT_TYPES, BadForkPoint, ForkPlan, renumbered_items
from agentruns.tools.registry import digest


def not_recorded(run_id: int, name: str) -> str:
    return (
        f"Error: not in the recording: the original run #{run_id} never called {name} with "
        "these arguments, so this replay has no result for it (nothing was executed)."
    )


def plan_replay(
    log: Sequence[LogEntry],
    *,
    run_id: int,
    replay: int,
    configuration: str,
    carried: Any,
    floor: dict[str, Any] | None = None,
) -> ForkPlan:
    """`log` is the original's thread log in order; the plan's items open with the
    `run.replayed` event of `replay` on `configuration`, carrying `carried` (and a
    child's `floor`, DEL-2)."""
    mine = [e for e in log if e.run_id == run_id]
    if not mine:
        raise BadForkPoint("The run has no events to replay.")
    # A fork's copied turns are where its task starts, not turns it made.
    first = next((e for e in mine if _own_turn(e)), None)
    upto = first.sequence - 1 if first else mine[-1].sequence
    prefix = [e for e in log if e.sequence <= upto]
    copied = [e for e in effective_events(prefix) if e.type in CONTEXT_TYPES]
    replayed = ev.RunReplayed(
        configuration,
        tuple(carried),
        replay,
        {"run": run_id, "at": upto},
        recording_of(log, run_id),
        floor,
    )
    opening: list[tuple[bool, str, dict[str, Any]]] = [(True, *replayed.item())]
    mode = thread_mode(prefix)
    if mode:
        opening.append((False, *ev.ModeSwitched(mode).item()))
    items = renumbered_items(copied, first=len(opening) + 1)
    own = [e.run_id == run_id and e.type != ev.COMPACTION for e in copied]
    copy = [(o, kind, payload) for o, (kind, payload) in zip(own, items, strict=True)]
    return ForkPlan(at=upto, items=[*opening, *copy])


def _own_turn(event: LogEntry) -> bool:
    data = event.data
    return isinstance(data, ev.AssistantMessage) and data.copied_from is None


def recording_of(log: Sequence[LogEntry], run_id: int) -> tuple[ev.Recorded, ...]:
    """Each result of the run's calls, in log order."""
    calls: dict[str, ev.ProposedCall] = {}
    recording = []
    for event in log:
        if event.run_id != run_id:
            continue
        data = event.data
        if isinstance(data, ev.AssistantMessage):
            calls.update({call.id: call for call in data.tool_calls})
        elif isinstance(data, ev.ToolResult) and data.call_id in calls:
            call = calls[data.call_id]
            recording.append(
                ev.Recorded(
                    call.name,
                    digest(call.arguments),
                    data.status,
                    data.content,
                    data.data_class,
                    data.added_tool_names,
                )
            )
    return tuple(recording)


def recording_in(log: Sequence[LogEntry]) -> ev.RunReplayed | None:
    """A replay's opening (with its recording), from its log's first event; None for
    every other run."""
    if log and isinstance(opening := log[0].data, ev.RunReplayed):
        return opening
    return None


def answer(
    replayed: ev.RunReplayed, call: ev.ProposedCall, log: Sequence[LogEntry], run_id: int
) -> ev.Recorded | None:
    """The recorded result for the replay's `call`: the original's results of the same
    tool with the same arguments in their order (the replay's earlier such calls took the
    first ones), the last one again once they are used up; None when the original never
    made that call."""
    key = digest(call.arguments)
    found = [r for r in replayed.recording if r.tool == call.name and r.arguments == key]
    if not found:
        return None
    return found[min(_before(log, run_id, call), len(found) - 1)]


def _before(log: Sequence[LogEntry], run_id: int, call: ev.ProposedCall) -> int:
    """How many calls of the run came before `call` with its tool and arguments."""
    key, count = (call.name, digest(call.arguments)), 0
    for event in log:
        data = event.data
        if event.run_id != run_id or not isinstance(data, ev.AssistantMessage):
            continue
        for made in data.tool_calls:
            if made.id == call.id:
                return count
            count += (made.name, digest(made.arguments)) == key
    return count
