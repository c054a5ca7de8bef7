"""DEL-1, DEL-2, DEL-4: a child run's end handed back to the parent that waits for it.

The parent parked on a `delegation` ticket in the transaction that created the child, so
the child can only end after the parent parked. Its end answers that ticket in the
transaction that writes the child's terminal state, holding the parent's row lock (taken
before the child's own row, the order a parent's cancel takes them in): the same wake-up
a person's answer is (ticket answered, the call's result in the parent's log, the parent
queued with its wake-up), so it happens exactly once or, with a crash before that commit,
not at all and again when the child is driven to its end anew. A parent that was
cancelled meanwhile has no active ticket, and the child's end changes nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentruns import events as ev
from agentruns.classes import DataClass, parse_class
from agentruns.events import LogEntry
from agentruns.models import Run
from agentruns.store.delegation import audited_classes, delegation_answer, run_lock
from agentruns.tools.policy import result_class
from agentruns.tools.registry import DELEGATE_TOOL


@dataclass(frozen=True)
class Parent:
    """Who delegated a child run (the parent run and its `agent.delegate` call), how deep
    the child is (the root is 0) and how many tool calls its tree left it (DEL-3)."""

    run: int
    call_id: str
    depth: int = 1
    tool_call_budget: int | None = None


def delegated_by(log: Sequence[LogEntry]) -> Parent | None:
    """A child's thread log opens with `run.delegated` (this reads one event)."""
    if log and isinstance(opening := log[0].data, ev.RunDelegated):
        return Parent(
            opening.parent_run, opening.parent_call_id, opening.depth, opening.tool_call_budget
        )
    return None


def lock_parent(parent: Parent) -> None:
    """The parent's row lock, taken before anything of the child is written."""
    run_lock(parent.run)


def child_class(child_id: int, log: Iterable[LogEntry]) -> DataClass | None:
    """DEL-2: what the child's result carries back, the strictest class its sends carried
    (the gate's rows name each send's strictest source, the parent's floor included) and
    its results carried (MCP-4)."""
    classes = [parse_class(label) for label in audited_classes(child_id)]
    classes += [
        result_class(result.tool, result.data_class or "")
        for e in log
        if isinstance(result := e.data, ev.ToolResult)
    ]
    return max((c for c in classes if c is not None), default=None)


def child_result(
    child_id: int, status: str, final_reply: str, failure: dict[str, Any] | None
) -> tuple[str, str]:
    """DEL-1, DEL-4: a completed child's final reply is an `ok` result; a failed or
    cancelled child is an `error` result for its parent, never a failed parent."""
    if status == Run.Status.COMPLETED:
        return ev.OK, final_reply
    if status == Run.Status.CANCELLED:
        return ev.ERROR, f"Error: the delegated run #{child_id} was cancelled."
    failure = failure or {}
    code, detail = failure.get("code", "failed"), failure.get("detail", "")
    return ev.ERROR, f"Error: the delegated run #{child_id} failed ({code}): {detail}"


def hand_back(
    *,
    child_id: int,
    parent: Parent,
    status: str,
    content: str,
    data_class: DataClass | None,
    tool_calls: int,
) -> bool:
    """Answer the parent's delegation ticket for this child, inside the transaction that
    ends the child and after `lock_parent`; False when no such ticket is active."""
    result = ev.result_item(
        parent.call_id,
        DELEGATE_TOOL,
        status,
        content,
        data_class=data_class.label if data_class else None,
        tool_calls=tool_calls,  # DEL-3: the child tree's, counted
    )
    return delegation_answer(
        parent_id=parent.run, call_id=parent.call_id, child_id=child_id, result=result
    )
