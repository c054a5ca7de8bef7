"""Writing one durable step, fenced by the lease (LOOP-3, LOOP-8, CLU-2).

A step's events, checkpoints and row changes are written only while the run still carries
this worker's epoch. On PostgreSQL the whole step is ONE statement (data-modifying CTEs
behind a `FOR SHARE` fence on the run row), so outside a transaction it is also its own
commit: one round trip per durable step. The statement returns the run's cancel flag and
the catalog generation, so a step also learns, for free, whether it was cancelled or the
configuration changed. Other databases get the same writes as separate statements inside
a transaction. The statements themselves live in the store (`agentruns/store/postgres.py`,
`agentruns/store/portable.py`).

Durability is chosen per step. A step whose loss could only cost time — a model reply, a
read-only tool's result, a checkpoint — may commit without waiting for the WAL flush
(`synchronous_commit=off` for that one transaction; AGENTRUNS_FAST_COMMIT). PostgreSQL
flushes WAL in order, so the next durable commit (an effect's watermark, a write's result,
a ticket, a terminal state) makes every earlier step durable too: a crash of the database
server can lose only a tail of re-doable work, never an effect or a decision. A crashed
worker loses nothing either way.

A step whose loss could only cost time may also be *held* (`RunContext.write(hold=True)`):
not written yet, but merged into the next write, which fences it where it was taken. The
read-only results of a turn are held this way and go with the audit rows of the next
send, in one durable statement before the send (LOOP-4: every result is committed before
the loop acts on it; CG-4: the audit row before the send it justifies).
"""

from __future__ import annotations

from typing import Any

from agentruns.events import LogEntry
from agentruns.store import store
from agentruns.store.log import entries
from agentruns.store.records import Lease, Log, Step, Written

__all__ = ["Step", "read", "write"]


def write(lease: Lease, step: Step, *, durable: bool = True, count_today: bool = False) -> Written:
    """Write the step or raise Fenced; a step with audit rows is always durable."""
    durable = durable or bool(step.audits)
    return store().write_step(lease, step, durable=durable, count_today=count_today)


def read(lease: Lease, claimed: Log | None = None) -> tuple[list[LogEntry], dict[str, Any] | None]:
    """The thread's events in order and the run's newest checkpoint state: as the claim
    read them, or read now."""
    rows, state = claimed or store().read_log(lease.thread_id, lease.run_id)
    return entries(rows), state
