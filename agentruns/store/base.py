"""The one interface to the loop's persistence (after DBOS's `SystemDatabase`): the step
statement (with the ticket a parking step opens), the log read, the rows a step reads back
(a turn's invocations, the ticket an approval answered, the catalog generation, the day's
usage), claims, renewals, the gate's audit row and the webhook outbox.
`agentruns.store.store()` picks the implementation once: PostgreSQL (`postgres.py`, what
production and the suite run) or the portable one (`portable.py`, only what the embedded
SQLite demo needs)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import date, datetime

from django.db.models import Q
from django.db.models.functions import Now

from agentruns.models import (
    CatalogGeneration,
    DailyUsage,
    Event,
    Run,
    Ticket,
    ToolInvocation,
)
from agentruns.store.records import ClaimRow, Lease, Log, Step, Written


def lease_expired() -> Q:
    """A running run whose worker let its lease lapse (or never had one): CLU-3."""
    return Q(status=Run.Status.RUNNING) & (
        Q(lease_expires_at__lt=Now()) | Q(lease_expires_at__isnull=True)
    )


def claimable() -> Q:
    """CLU-2: queued, or running under an expired lease (a crash reclaim)."""
    return Q(status=Run.Status.QUEUED) | lease_expired()


class SystemStore(abc.ABC):
    """Each database's statements are a subclass's; the reads below are the same ORM
    query everywhere."""

    # Whether the database can take rows FOR UPDATE SKIP LOCKED (batch claims, dequeue).
    skip_locked: bool

    def invocations(
        self, run_id: int, turn_index: int, call_ids: Sequence[str]
    ) -> list[tuple[str, int, str, datetime | None]]:
        """(call id, invocation id, tool version, effect sent at) of a turn's calls."""
        turn = ToolInvocation.objects.filter(run_id=run_id, turn_index=turn_index)
        rows = turn.filter(call_id__in=call_ids)
        return list(rows.values_list("call_id", "pk", "tool_version", "effect_sent_at"))

    def approval_shown(self, run_id: int, call_id: str) -> tuple[str, str] | None:
        """HITL-5: (tool, arguments digest) of the call the answered ticket showed, or of
        the arguments its approvers edited and allowed (HITL-12)."""
        answered = Ticket.objects.filter(
            run_id=run_id, call_id=call_id, status=Ticket.Status.ANSWERED
        )
        row = answered.values_list("tool", "arguments_digest", "edited_digest").first()
        return None if row is None else (row[0], row[2] or row[1])

    def catalog_generation(self) -> int:
        """The live catalog generation (CG-9)."""
        return CatalogGeneration.current()

    def daily_limit_reached(
        self, configuration_id: int, limit: int | None, seen: tuple[date, int] | None
    ) -> bool:
        """OPS-2, read only when `seen` (a step write's answer) is not today's."""
        return DailyUsage.at_limit(configuration_id, limit, seen=seen)

    @abc.abstractmethod
    def write_step(self, lease: Lease, step: Step, *, durable: bool, count_today: bool) -> Written:
        """Write the step fenced by the lease or raise Fenced. `count_today` (OPS-2): return
        the day's total the configuration's counter reached, if the step used tokens (only
        a configuration with a daily limit checks it)."""
        ...

    @abc.abstractmethod
    def read_log(self, thread_id: int, run_id: int) -> Log:
        """The thread's events in order and the run's newest checkpoint state."""
        ...

    @abc.abstractmethod
    def claim(self, run_id: int, owner: str, seconds: float) -> ClaimRow | None:
        """Take the run if claimable: its CLAIM_FIELDS as they were, `composed` (whether its
        context was ever composed), the catalog `generation`, the attempts the claim `spent`
        (1 for a crash reclaim, CLU-3) and, where the claim read it
        too, the `log` (as `read_log` returns it); None if it is not claimable (or being
        claimed right now)."""
        ...

    @abc.abstractmethod
    def claim_queued(self, limit: int, owner: str, seconds: float) -> list[tuple[int, ClaimRow]]:
        """Claim up to `limit` queued runs, oldest first ([] where unsupported)."""
        ...

    @abc.abstractmethod
    def renew_many(self, leases: list[Lease], seconds: float) -> dict[int, bool]:
        """Renew every still-held lease; the cancel flag of each one renewed, by run id."""
        ...

    @abc.abstractmethod
    def claim_expired(self, limit: int, owner: str, seconds: float) -> list[tuple[int, ClaimRow]]:
        """Claim up to `limit` running runs whose lease expired, longest expired first:
        crash reclaims, each spending an attempt (CLU-3; [] where unsupported)."""
        ...

    @abc.abstractmethod
    def claim_unanswered(
        self, owners: list[str], limit: int, owner: str, seconds: float
    ) -> list[tuple[int, ClaimRow]]:
        """Claim up to `limit` running runs still leased to one of `owners` (claim
        statements whose reply was lost), spending no attempt ([] where unsupported)."""
        ...

    @abc.abstractmethod
    def queue_deliveries(self, events: Sequence[Event]) -> None:
        """OPS-4: one pending delivery per (event, active webhook that wants it), in the
        caller's transaction (events appended outside a step: submission, resume...)."""
        ...

    @abc.abstractmethod
    def dequeue_tasks(self, list_key: str, limit: int, lock_secs: float) -> list[tuple[int, str]]:
        """Take up to `limit` due rows of the ORM broker's queue (CLU-1) in one statement:
        (id, payload), oldest first. Only where `skip_locked`."""
        ...

    @abc.abstractmethod
    def database_now(self) -> datetime:
        """The database clock, which leases are measured on (CLU-2)."""
        ...

    @abc.abstractmethod
    def client_connections(self) -> int | None:
        """How many client connections the database has open, where it can say."""
        ...

    @abc.abstractmethod
    def make_durable(self) -> None:
        """Wait until every commit so far would survive a database crash, including the
        steps committed without waiting for the WAL flush (a client is about to rely on
        them: an events cursor)."""
        ...
