"""Closing a run's open calls when it ends early (a failure, a cancel, HITL-11): a thread
stays usable (every call has a result, as the providers demand) and no invocation looks
in flight. One function for the loop's endings and for cancelling a parked run
(services/runs.py); each writes what it returns its own way (a fenced step, an append)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from agentruns import events as ev
from agentruns.models import ToolInvocation
from agentruns.runtime.state import ProposedCall
from agentruns.store.rows import InvocationChange

UNKNOWN = (
    "Outcome unknown: the effect may have happened before the worker stopped. It will not "
    "be repeated automatically; an approver has been shown this call."
)
INTERRUPTED = "Interrupted: the run ended before this call ran."


def close_open_calls(
    calls: Sequence[ProposedCall], invocations: Mapping[str, tuple[int, bool]], now: datetime
) -> tuple[list[tuple[str, dict[str, Any]]], list[InvocationChange]]:
    """A result for each open call, uncertain if its effect may have happened, else an
    interruption; and the final status of each one's invocation row, by row id.
    `invocations` maps a call id to (its row id, whether its effect was sent)."""
    items: list[tuple[str, dict[str, Any]]] = []
    updates: list[InvocationChange] = []
    for call in calls:
        row, sent = invocations.get(call.id, (None, False))
        if sent:
            items.append(ev.result_item(call.id, call.name, ev.UNCERTAIN, UNKNOWN))
        else:
            items.append(ev.result_item(call.id, call.name, ev.ERROR, INTERRUPTED))
        if row is not None:
            status = ToolInvocation.Status.UNCERTAIN if sent else ToolInvocation.Status.INTERRUPTED
            updates.append(InvocationChange(row, status, completed_at=now))
    return items, updates
