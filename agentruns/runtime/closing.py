"""Closing a run's open calls when it ends early (a failure, a cancel, HITL-11): a thread
stays usable (every call has a result, as the providers demand) and no invocation looks
in flight. One rule for the loop's endings and for cancelling a parked run."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from agentruns import events as ev
from agentruns.models import ToolInvocation
from agentruns.runtime.state import ProposedCall

UNKNOWN = (
    "Outcome unknown: the effect may have happened before the worker stopped. It will not "
    "be repeated automatically; an approver has been shown this call."
)
INTERRUPTED = "Interrupted: the run ended before this call ran."


def close_open_calls(
    calls: Sequence[ProposedCall], sent: Collection[str]
) -> list[tuple[str, dict[str, Any]]]:
    """A result for each open call: uncertain if its effect may have happened (its call id
    is in `sent`), else an interruption."""
    return [
        ev.result_item(call.id, call.name, ev.UNCERTAIN, UNKNOWN)
        if call.id in sent
        else ev.result_item(call.id, call.name, ev.ERROR, INTERRUPTED)
        for call in calls
    ]


def closed_status(sent: bool) -> str:
    """The final status of a closed call's invocation row."""
    return ToolInvocation.Status.UNCERTAIN if sent else ToolInvocation.Status.INTERRUPTED
