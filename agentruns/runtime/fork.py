"""FORK-1: the log a fork starts with, a pure function of its original's log.

A fork at a model turn keeps that turn and what answered it: the new thread starts with a
copy of the original's *effective* context up to there (DEF-6: the newest compaction and
what followed it; the mode the thread was in, DEF-1; tool results, with the deferred tools
they activated, DEF-4), so the fork's first send carries exactly what the original's next
send would have carried, with the fork's own configuration around it. Copied results are
reused, never executed again. A call of that turn that had no result (a parked call, one
still running) gets a result saying it was not decided in the original run: a fork never
inherits an open ticket, and never an approval that was not given.

Without a new prompt the fork continues the original run from that turn, so the copied
events of that run are the fork's own (its fold sees every copied call answered and asks
the model next); with a new prompt everything copied is history, as for a follow-up run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.gate.core import Source, delegated_source, parse_label
from agentruns.runtime.compose import thread_mode
from agentruns.runtime.context import effective_events

# What a send is composed of (runtime/context.project); everything else is the original
# run's record (tickets, redactions, verdicts), not context.
CONTEXT_TYPES = (ev.USER, ev.ASSISTANT, ev.TOOL_RESULT, ev.COMPACTION)
# A copy carries no `usage` (OPS-1): the original paid for the copied turns.
Item = ev.Item


class BadForkPoint(ValueError):
    """`at` names no model turn of the run, or a fork from it would have nothing to do."""


def not_decided(run_id: int) -> str:
    return (
        f"Not decided in the original run #{run_id}: this run was forked from it before "
        "this call had a result, so it was not run here."
    )


@dataclass(frozen=True)
class ForkPlan:
    at: int  # the original thread's sequence the copy ends at (a turn, or the run's end)
    # The new thread's log from sequence 1, each event with whether it is the fork run's
    # own (its fold continues from it) or history (run_id None). The first is `run.forked`.
    items: list[tuple[bool, str, dict[str, Any]]] = field(default_factory=list)


def plan_fork(
    log: Sequence[LogEntry],
    *,
    run_id: int,
    at: int | None,
    new_prompt: bool,
    forked: Mapping[str, Any],
) -> ForkPlan:
    """`log` is the original's thread log in order; `at` the sequence of one of `run_id`'s
    `message.assistant` events, or None for the run's end; `forked` the `run.forked`
    payload the fork's log opens with ({configuration, carried}; `forked_from` is added
    here)."""
    mine = [e for e in log if e.run_id == run_id]
    if not mine:
        raise BadForkPoint("The run has no events to fork from.")
    turn, upto = _fork_point(mine, at)
    if turn is not None and not _calls(turn) and not new_prompt:
        raise BadForkPoint(
            f"Event #{turn.sequence} is the run's final reply: a fork from it needs a new "
            "prompt (input)."
        )
    kept = {id(e) for e in mine if _answers(e, turn)}
    prefix = [e for e in log if e.sequence <= upto or id(e) in kept]
    copied = [e for e in effective_events(prefix) if e.type in CONTEXT_TYPES]
    mode = thread_mode(prefix)
    opening_event = ev.RunForked.from_payload(
        {**forked, "forked_from": {"run": run_id, "at": upto}}
    )
    opening: list[tuple[bool, str, dict[str, Any]]] = [(True, *opening_event.item())]
    if mode:
        opening.append((False, *ev.ModeSwitched(mode).item()))
    renumbered = renumbered_items(copied, first=len(opening) + 1)
    items = [
        *opening,
        *(
            (not new_prompt and e.run_id == run_id and e.type != ev.COMPACTION, kind, payload)
            for e, (kind, payload) in zip(copied, renumbered, strict=True)
        ),
        *((not new_prompt, kind, payload) for kind, payload in _closing(turn, copied, run_id)),
    ]
    return ForkPlan(at=upto, items=items)


def _fork_point(mine: list[LogEntry], at: int | None) -> tuple[LogEntry | None, int]:
    """The turn the copy keeps and the last sequence of the run it covers."""
    turns = [e for e in mine if e.type == ev.ASSISTANT]
    if at is None:
        return (turns[-1] if turns else None), mine[-1].sequence
    for turn in turns:
        if turn.sequence == at:
            return turn, at
    raise BadForkPoint(f"Event #{at} is not a model turn (message.assistant) of this run.")


def _answers(event: LogEntry, turn: LogEntry | None) -> bool:
    """A result of the kept turn's calls, wherever its run recorded it (a decision may
    have come long after the turn)."""
    if turn is None or event.type != ev.TOOL_RESULT or event.sequence <= turn.sequence:
        return False
    ids = {call.id for call in _calls(turn)}
    return isinstance(result := event.data, ev.ToolResult) and result.call_id in ids


def _calls(turn: LogEntry) -> tuple[ev.ProposedCall, ...]:
    data = turn.data
    return data.tool_calls if isinstance(data, ev.AssistantMessage) else ()


def renumbered_items(copied: list[LogEntry], *, first: int) -> list[Item]:
    """The copied events as new items: sequences from `first` in the new thread, a
    compaction's `kept_from` pointing at its own kept events there, the original's
    usage left with the original (OPS-1), and where each came from."""
    new_sequence = {e.sequence: first + i for i, e in enumerate(copied)}
    items = []
    for event in copied:
        data = event.data
        origin = ev.CopiedFrom(event.run_id, event.sequence)
        if isinstance(data, ev.Compaction):
            kept_from = new_sequence[event.sequence] + 1
            data = replace(data, kept_from=kept_from, usage=None, copied_from=origin)
        elif isinstance(data, ev.AssistantMessage):
            data = replace(data, usage=None, copied_from=origin)
        elif isinstance(data, ev.UserMessage | ev.ToolResult):
            data = replace(data, copied_from=origin)
        items.append(data.item())
    return items


def _closing(turn: LogEntry | None, copied: list[LogEntry], run_id: int) -> list[Item]:
    if turn is None:
        return []
    answered = {data.call_id for e in copied if isinstance(data := e.data, ev.ToolResult)}
    return [
        ev.result_item(call.id, call.name, ev.REFUSED, not_decided(run_id))
        for call in _calls(turn)
        if call.id not in answered
    ]


def carried_of(log: Sequence[LogEntry]) -> tuple[dict[str, Any], ...]:
    """The sources a fork's thread carries from its original, or a child's from its parent
    (DEL-2) or a replay's from its original (GOV-4) ({kind, id, from}): its log opens with
    `run.forked`, `run.delegated` or `run.replayed`, so this reads one event, never the
    whole log."""
    if log and isinstance(opening := log[0].data, ev.RunForked | ev.RunDelegated | ev.RunReplayed):
        return opening.carried
    return ()


def floor_of(log: Sequence[LogEntry]) -> dict[str, Any] | None:
    """DEL-2: the floor a thread's sends are held to ({run, class, origin}: the parent run
    and its label), or None: a child's, and a fork's or a replay's of a child's thread
    (else forking or replaying a child would be a way around it). One event, as
    `carried_of`."""
    opening = log[0].data if log else None
    if isinstance(opening, ev.RunDelegated) and opening.floor is not None:
        return {"run": opening.parent_run, **opening.floor}
    if isinstance(opening, ev.RunForked | ev.RunReplayed):
        return opening.floor
    return None


def delegated_floor(log: Sequence[LogEntry]) -> tuple[Source, ...]:
    """DEL-2: what a child's sends carry besides its parent's sources by identity: the
    parent's effective class when it delegated (tool and MCP results, labelled replies,
    an earlier child's result), named "delegated by run N" with what set it; a fork's or
    a replay's of the child the same (`floor_of`)."""
    floor = floor_of(log)
    label = parse_label(floor)
    if floor is None or label is None:
        return ()
    return (delegated_source(int(floor.get("run") or 0), label),)
