"""The one interface to the loop's persistence (after DBOS's `SystemDatabase`): the step
statement, the log read, claims, renewals and the gate's audit row. `agentruns.store.store()`
picks the implementation once: PostgreSQL (`postgres.py`, what production and the suite
run) or the portable one (`portable.py`, only what the embedded SQLite demo needs)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from django.db.models import Q
from django.db.models.functions import Now

from agentruns.models import Event, GateAudit, Run
from agentruns.store.records import Lease, Step, Written

# (sequence, type, payload, run_id) in log order.
LogRow = tuple[int, str, dict[str, Any], int | None]


def lease_expired() -> Q:
    """A running run whose worker let its lease lapse (or never had one): CLU-3."""
    return Q(status=Run.Status.RUNNING) & (
        Q(lease_expires_at__lt=Now()) | Q(lease_expires_at__isnull=True)
    )


def claimable() -> Q:
    """CLU-2: queued, or running under an expired lease (a crash reclaim)."""
    return Q(status=Run.Status.QUEUED) | lease_expired()


class SystemStore(Protocol):
    # Whether the database can take rows FOR UPDATE SKIP LOCKED (batch claims, dequeue).
    skip_locked: bool

    def write_step(self, lease: Lease, step: Step, *, durable: bool) -> Written:
        """Write the step fenced by the lease or raise Fenced."""
        ...

    def read_log(self, thread_id: int, run_id: int) -> tuple[list[LogRow], dict | None]:
        """The thread's events in order and the run's newest checkpoint state."""
        ...

    def claim(self, run_id: int, owner: str, seconds: float) -> dict | None:
        """Take the run if claimable: its CLAIM_FIELDS as they were, `composed_at` and the
        catalog `generation`; None if it is not claimable (or being claimed right now)."""
        ...

    def claim_queued(self, limit: int, owner: str, seconds: float) -> list[tuple[int, dict]]:
        """Claim up to `limit` queued runs, oldest first ([] where unsupported)."""
        ...

    def renew_many(self, leases: list[Lease], seconds: float) -> dict[int, bool]:
        """Renew every still-held lease; the cancel flag of each one renewed, by run id."""
        ...

    def claim_expired(self, limit: int, owner: str, seconds: float) -> list[tuple[int, dict]]:
        """Claim up to `limit` running runs whose lease expired, longest expired first:
        crash reclaims, each spending an attempt (CLU-3; [] where unsupported)."""
        ...

    def queue_deliveries(self, events: Sequence[Event]) -> None:
        """OPS-4: one pending delivery per (event, active webhook that wants it), in the
        caller's transaction (events appended outside a step: submission, resume...)."""
        ...

    def save_audit(self, row: GateAudit, *, epoch: int | None) -> int:
        """Write the audit row durably, and with an `epoch` only while the run still
        carries it (else raise Fenced); return the live catalog generation."""
        ...

    def dequeue_tasks(self, list_key: str, limit: int, lock_secs: float) -> list[tuple[int, str]]:
        """Take up to `limit` due rows of the ORM broker's queue (CLU-1) in one statement:
        (id, payload), oldest first. Only where `skip_locked`."""
        ...

    def database_now(self) -> datetime:
        """The database clock, which leases are measured on (CLU-2)."""
        ...

    def client_connections(self) -> int | None:
        """How many client connections the database has open, where it can say."""
        ...

    def make_durable(self) -> None:
        """Wait until every commit so far would survive a database crash, including the
        steps committed without waiting for the WAL flush (a client is about to rely on
        them: an events cursor)."""
        ...
