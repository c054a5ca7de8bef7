"""The plain records the store reads and writes for the loop: a lease and a step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

from django.conf import settings
from django.db.models import Q


@dataclass
class Lease:
    run_id: int
    thread_id: int
    configuration_id: int
    epoch: int
    owner: str
    generation: int
    reclaimed: bool
    attempts: int
    forced_snippet_ids: list[int] | None
    forced_skill_ids: list[int] | None
    composed: bool
    seconds: float = field(default_factory=lambda: settings.AGENTRUNS_LEASE_SECONDS)
    renewed_at: float = field(default_factory=time.monotonic)
    cancel_requested: bool = False
    # OPS-2: (UTC day, the configuration's tokens that day) as this run's last model turn's
    # write returned them, so the next turn's limit check needs no read of its own.
    used_today: tuple[date, int] | None = None
    # Set by the process heartbeat when a renewal found the epoch moved on.
    lost: bool = False
    # Set by the driver when its process is shutting down: release at the next boundary.
    stop_requested: bool = False

    @property
    def fence(self) -> Q:
        return Q(pk=self.run_id, epoch=self.epoch)


class LogEvent(Protocol):
    """What the store needs of an event (the runtime's `Ev`)."""

    @property
    def sequence(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...


@dataclass
class Step:
    """Everything one durable step writes."""

    events: Sequence[LogEvent] = field(default_factory=list)
    checkpoints: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    new_invocations: list[dict[str, Any]] = field(default_factory=list)
    invocation_updates: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    run_update: dict[str, Any] = field(default_factory=dict)
    # The newest sequence of the thread this worker has seen (0: none). The step is written
    # only if the log still holds it: a database crash can lose a tail of steps committed
    # without waiting for the WAL flush, and a worker that carried on over a fresh
    # connection would otherwise act on (and leave gaps after) steps that no longer exist.
    after: int = 0


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


def event_row(lease: Lease, event: LogEvent, now: Any) -> dict[str, Any]:
    return {
        "thread_id": lease.thread_id,
        "run_id": lease.run_id,
        "sequence": event.sequence,
        "type": event.type,
        "payload": event.payload,
        "created_at": now,
    }


def checkpoint_row(lease: Lease, checkpoint: tuple, now: Any) -> dict[str, Any]:
    kind, last_sequence, state = checkpoint
    return {
        "run_id": lease.run_id,
        "kind": kind,
        "last_sequence": last_sequence,
        "state": state,
        "created_at": now,
    }
