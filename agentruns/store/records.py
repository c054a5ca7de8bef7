"""The plain records the store reads and writes for the loop: a claim (its lease, its
signals), a step and what writing it returned."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from django.conf import settings
from django.db.models import Q

from agentruns.events import LogEntry
from agentruns.frozen import quick
from agentruns.store.rows import InvocationChange, NewInvocation, NewTicket, RunUpdate

# (sequence, type, payload, run_id) in log order.
LogRow = tuple[int, str, dict[str, Any], int | None]
# The thread's log and the run's newest checkpoint state, as the store read them.
Log = tuple[list[LogRow], dict[str, Any] | None]
# The run as a claim statement found it: CLAIM_FIELDS, then `composed`, `generation`,
# `spent` (the attempts the claim spent) and, where the claim read it, `log`.
ClaimRow = dict[str, Any]
# A checkpoint a step takes: (kind, the last sequence folded, the folded state).
Taken = tuple[str, int, dict[str, Any]]


@dataclass(frozen=True)
class Lease:
    """What fences a worker's writes (CLU-2): the run, the thread whose log its steps
    extend, the configuration they are charged to (OPS-1), and the epoch this worker's
    claim gave the run. It never changes: a run claimed again is a new lease."""

    run_id: int
    thread_id: int
    configuration_id: int
    epoch: int
    owner: str
    seconds: float = field(default_factory=lambda: settings.AGENTRUNS_LEASE_SECONDS)

    @property
    def fence(self) -> Q:
        return Q(pk=self.run_id, epoch=self.epoch)


class Signals:
    """What the threads that share a claimed run tell its executor, read at every step
    boundary. Each flag only ever goes from clear to set:

    - cancel (HITL-11): the store's step writes and the heartbeat's renewals bring the
      run's cancel flag back;
    - stop: the driver's process is shutting down: release the run at the next boundary;
    - lost (CLU-2): a renewal or a write found the epoch moved on.

    And when the lease was last renewed, by the heartbeat or by the executor itself."""

    def __init__(self, *, cancel: bool = False) -> None:
        self._cancel, self._stop, self._lost = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        if cancel:
            self._cancel.set()
        self._renewed_at = time.monotonic()
        self._lock = threading.Lock()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def request_cancel(self) -> None:
        self._cancel.set()

    def request_stop(self) -> None:
        self._stop.set()

    def lose(self) -> None:
        self._lost.set()

    def renewed(self, at: float) -> None:
        with self._lock:
            self._renewed_at = max(self._renewed_at, at)

    def renewal_due(self, seconds: float) -> bool:
        """At about a third of the lease, so two missed renewals still leave slack."""
        return time.monotonic() - self._renewed_at >= seconds / 3


@dataclass(frozen=True)
class Claim:
    """What a claim hands the executor: the lease, the signals, and the run as the claim
    found it. What changes while the run is driven (the catalog generation it knows,
    today's usage, the forced set once composed) is the executor's (`RunContext`)."""

    lease: Lease
    attempts: int
    reclaimed: bool
    forced_snippet_ids: tuple[int, ...] | None
    forced_skill_ids: tuple[int, ...] | None
    composed: bool
    generation: int
    signals: Signals = field(default_factory=Signals, compare=False)
    # The log as the claim statement read it (PostgreSQL), so the executor's first read
    # costs no statement of its own (PERF-4); None where the claim did not read it.
    log: Log | None = field(default=None, compare=False, repr=False)


@quick
@dataclass(frozen=True, slots=True)
class Written:
    """What a step write hands back: the new invocation ids by call id, and, for free,
    the run's cancel flag, the live catalog generation and, when the step used tokens,
    (UTC day, the configuration's tokens that day) (OPS-2)."""

    invocations: dict[str, int]
    cancel_requested: bool
    generation: int
    used_today: tuple[date, int] | None = None


@quick
@dataclass(frozen=True, slots=True)
class Rows:
    """The rows a step writes besides its events and checkpoints (store/rows.py): the
    invocations a model turn authorises (TOOL-3), changes of invocation rows, of the run
    row, and the tickets a parking step opens (HITL-2; DEL-1: one per delegation call when
    a turn's siblings start together). Built `quick` (PERF-1): a step's caller builds one
    on the hot path and the step statement reads each field, which a slot serves quicker
    than a named tuple's field; a step without rows shares `NO_ROWS`."""

    new_invocations: Sequence[NewInvocation] = ()
    invocation_updates: Sequence[InvocationChange] = ()
    run_update: RunUpdate | None = None
    new_tickets: Sequence[NewTicket] = ()

    def then(self, later: Rows) -> Rows:
        """These rows and a later step's as one write's: the later run update's values win."""
        if later is NO_ROWS or self is NO_ROWS:  # held results and a send's audits: no copy
            return self if later is NO_ROWS else later
        return Rows(
            [*self.new_invocations, *later.new_invocations],
            [*self.invocation_updates, *later.invocation_updates],
            RunUpdate.merged(self.run_update, later.run_update),
            [*self.new_tickets, *later.new_tickets],
        )


NO_ROWS = Rows()


@dataclass
class Step:
    """Everything one durable step writes. Its defaults are immutable and shared: a step is
    built per durable write (PERF-1) and what it leaves out costs nothing."""

    events: Sequence[LogEntry] = ()
    checkpoints: Sequence[Taken] = ()
    rows: Rows = NO_ROWS
    # The newest sequence of the thread this worker has seen (0: none). The step is written
    # only if the log still holds it: a database crash can lose a tail of steps committed
    # without waiting for the WAL flush, and a worker that carried on over a fresh
    # connection would otherwise act on (and leave gaps after) steps that no longer exist.
    after: int = 0
    # CG-4: the audit rows of the send that follows the step, written only behind the same
    # fence. A step that carries them is durable: each row is a send's justification.
    audits: Sequence[dict[str, Any]] = ()

    def then(self, later: Step) -> Step:
        """This step and a later one as one write, fenced where this one was. They commit
        together, so no restore can start from this step's checkpoint when the later one
        takes its own (a held result's, then the next one's): only the later one is
        written. LOOP-8's `tool completed` is then one checkpoint per commit, after its
        last result."""
        return Step(
            events=[*self.events, *later.events],
            checkpoints=later.checkpoints or self.checkpoints,
            rows=self.rows.then(later.rows),
            after=self.after,
            audits=[*self.audits, *later.audits],
        )


# A claim reads these columns of the run as they were before it.
CLAIM_FIELDS = (
    "status",
    "thread_id",
    "configuration_id",
    "epoch",
    "attempts",
    "forced_snippet_ids",
    "forced_skill_ids",
    "cancel_requested",
)


def event_row(lease: Lease, event: LogEntry, now: Any) -> dict[str, Any]:
    return {
        "thread_id": lease.thread_id,
        "run_id": lease.run_id,
        "sequence": event.sequence,
        "type": event.type,
        "payload": event.payload,
        "created_at": now,
    }


def checkpoint_row(lease: Lease, checkpoint: Taken, now: Any) -> dict[str, Any]:
    kind, last_sequence, state = checkpoint
    return {
        "run_id": lease.run_id,
        "kind": kind,
        "last_sequence": last_sequence,
        "state": state,
        "created_at": now,
    }
