"""The rows a durable step writes besides its events and checkpoints, as types (LOOP-3,
TOOL-3, HITL-2): the invocations a model turn authorises, the ticket a parking step
opens, the changes of invocation rows and of the run row. A misspelt column is a type
error here, not a `KeyError` in the hot path. Each row gives its columns as a dict in
one fixed order, so a step's statement text (and its prepared plan) depends only on
which rows it carries (store/steps.py). They are named tuples, not dataclasses: a model
turn builds one per call on the hot path, and a tuple is built in C (PERF-1)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from django.utils import timezone

from agentruns.frozen import quick


def release_columns() -> dict[str, Any]:
    """The run holds no worker and no lease (parked, handed back or ended)."""
    return {"lease_owner": "", "lease_expires_at": None, "updated_at": timezone.now()}


class NewInvocation(NamedTuple):
    """TOOL-3: a call the model turn granted, recorded before it may run; its status says
    whether it waits for a person (HITL-1)."""

    run_id: int
    turn_index: int
    call_id: str
    tool: str
    tool_version: str
    arguments: dict[str, Any]
    arguments_digest: str
    idempotency_key: str
    status: str

    def row(self) -> dict[str, Any]:
        """Its `ToolInvocation` columns."""
        return dict(zip(INVOCATION_COLUMNS, self, strict=True))


# NewInvocation's fields as the table's columns, in order.
INVOCATION_COLUMNS = (
    "run_id",
    "turn_index",
    "call_id",
    "tool",
    "tool_version",
    "arguments",
    "arguments_digest",
    "idempotency_key",
    "status",
)


class NewTicket(NamedTuple):
    """HITL-2: the ticket a parking step opens, active from the step's commit on."""

    correlation_id: UUID
    run_id: int
    thread_id: int
    snapshot_id: str
    catalog_fingerprint: str
    deadline: datetime | None
    kind: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    arguments_digest: str
    question: str
    schema: Any
    child_id: int | None = None

    def row(self) -> dict[str, Any]:
        """Its `Ticket` columns but the status, which the store sets."""
        return self._asdict()


class InvocationChange(NamedTuple):
    """A new status of an invocation row, with what comes with it: when it ended and its
    result, or when its effect was sent (TOOL-4's watermark). None: unchanged."""

    pk: int
    status: str
    completed_at: datetime | None = None
    result: dict[str, Any] | None = None
    effect_sent_at: datetime | None = None

    def changes(self) -> dict[str, Any]:
        changed: dict[str, Any] = {"status": self.status}
        if self.effect_sent_at is not None:
            changed["effect_sent_at"] = self.effect_sent_at
        if self.result is not None:
            changed["result"] = self.result
        if self.completed_at is not None:
            changed["completed_at"] = self.completed_at
        return changed


class Ending(NamedTuple):
    """What a run's terminal step writes beside its status: the final reply (empty
    unless it completed) and the failure (None unless it failed)."""

    final_reply: str
    failure: dict[str, Any] | None


class RunUpdate(NamedTuple):
    """The columns of the run row a step changes, fenced by the lease; None: unchanged. A
    `status` also frees the lease (`release_columns`): a running run's step moves it only
    to park, hand it back or end it."""

    status: str | None = None
    ending: Ending | None = None
    turns: int | None = None
    tool_calls_used: int | None = None
    last_sequence: int | None = None
    forced_snippet_ids: tuple[int, ...] | None = None
    forced_skill_ids: tuple[int, ...] | None = None
    composed_at: datetime | None = None

    def columns(self) -> dict[str, Any]:
        changed: dict[str, Any] = {}
        if self.ending is not None:
            changed["final_reply"] = self.ending.final_reply
            changed["failure"] = self.ending.failure
        for name in COUNTERS:
            value = getattr(self, name)
            if value is not None:
                changed[name] = value
        if self.forced_snippet_ids is not None:
            changed["forced_snippet_ids"] = list(self.forced_snippet_ids)
        if self.forced_skill_ids is not None:
            changed["forced_skill_ids"] = list(self.forced_skill_ids)
        if self.composed_at is not None:
            changed["composed_at"] = self.composed_at
        if self.status is not None:
            changed["status"] = self.status
            changed.update(release_columns())
        return changed

    @staticmethod
    def merged(earlier: RunUpdate | None, later: RunUpdate | None) -> RunUpdate | None:
        """Two steps' updates as one write's: the later one's values win."""
        if earlier is None or later is None:
            return later or earlier
        kept = (new if new is not None else old for old, new in zip(earlier, later, strict=True))
        return RunUpdate._make(kept)


COUNTERS = ("turns", "tool_calls_used", "last_sequence")


@quick
@dataclass(frozen=True, slots=True)
class StepResult:
    """The step statement's row (store/steps.py): whether the fence held (1 or 0), the run's cancel
    flag, the live catalog generation, [[call id, invocation id]] of the step's new
    invocations, the configuration's tokens today (when the step used any and the
    caller counts them), and whether any webhook is active. Its fields are read as
    slots, quicker than a named tuple's (PERF-1)."""

    held: int
    cancel_requested: bool | None
    generation: int
    created: list[list[Any]] | None
    used_today: int | None
    subscribed: bool
