"""Writing one durable step, fenced by the lease (LOOP-3, LOOP-8, CLU-2).

A step's events, checkpoints and row changes are written only while the run still carries
this worker's epoch. On PostgreSQL the whole step is ONE statement (data-modifying CTEs
behind a `FOR SHARE` fence on the run row), so outside a transaction it is also its own
commit: one round trip per durable step. The statement returns the run's cancel flag and
the catalog generation, so a step also learns, for free, whether it was cancelled or the
configuration changed. Other databases get the same writes as separate statements inside
a transaction.

Durability is chosen per step. A step whose loss could only cost time — a model reply, a
read-only tool's result, a checkpoint — may commit without waiting for the WAL flush
(`synchronous_commit=off` for that one transaction; AGENTRUNS_FAST_COMMIT). PostgreSQL
flushes WAL in order, so the next durable commit (an effect's watermark, a write's result,
a ticket, a terminal state) makes every earlier step durable too: a crash of the database
server can lose only a tail of re-doable work, never an effect or a decision. A crashed
worker loses nothing either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentruns.errors import Fenced
from agentruns.models import (
    CatalogGeneration,
    Checkpoint,
    Event,
    Run,
    ToolInvocation,
)
from agentruns.runtime.dbconn import fast_commit, prepared, prepared_rows, this_connection
from agentruns.runtime.lease import Lease
from agentruns.runtime.state import Ev

JSON_COLUMNS = {
    "payload",
    "state",
    "arguments",
    "result",
    "failure",
    "forced_snippet_ids",
    "forced_skill_ids",
}
TIME_COLUMNS = {
    "created_at",
    "completed_at",
    "effect_sent_at",
    "lease_expires_at",
    "updated_at",
    "composed_at",
}
EVENT_COLUMNS = ("thread_id", "run_id", "sequence", "type", "payload", "created_at")
CHECKPOINT_COLUMNS = ("run_id", "kind", "last_sequence", "state", "created_at")
INVOCATION_COLUMNS = (
    "run_id",
    "step",
    "call_id",
    "tool",
    "tool_version",
    "arguments",
    "arguments_digest",
    "idempotency_key",
    "status",
    "created_at",
)


@dataclass
class Step:
    """Everything one durable step writes."""

    events: list[Ev] = field(default_factory=list)
    checkpoints: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    new_invocations: list[dict[str, Any]] = field(default_factory=list)
    invocation_updates: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    run_update: dict[str, Any] = field(default_factory=dict)


def write(lease: Lease, step: Step, *, durable: bool = True) -> dict[str, int]:
    """Write the step or raise Fenced; returns new invocation ids by call id."""
    if this_connection().vendor == "postgresql":
        row = _write_statement(lease, step, fast_commit(durable))
        if not row[0]:
            _lost(lease)
        lease.cancel_requested, lease.generation = bool(row[1]), row[2]
        return {call_id: pk for call_id, pk in (row[3] or [])}
    with transaction.atomic():
        return _write_statements(lease, step)


def _lost(lease: Lease) -> None:
    lease.lost = True
    raise Fenced("the lease was taken by another worker")


# ---- PostgreSQL: one statement --------------------------------------------------------


def _cast(column: str) -> str:
    if column in JSON_COLUMNS:
        return "::jsonb"
    if column in TIME_COLUMNS:
        return "::timestamptz"
    return ""


def _value(column: str, value: Any) -> Any:
    if column in JSON_COLUMNS and value is not None:
        return json.dumps(value)
    return value


def _insert(name: str, table: str, columns: tuple[str, ...], rows: list[dict], params: list) -> str:
    row = "(" + ", ".join(f"%s{_cast(c)}" for c in columns) + ")"
    for values in rows:
        params.extend(_value(c, values[c]) for c in columns)
    names = ", ".join(columns)
    returning = "id, call_id" if name == "inv" else "1"
    return (
        f"{name} AS (INSERT INTO {table} ({names}) SELECT * FROM (VALUES "
        f"{', '.join([row] * len(rows))}) AS v ({names}) "
        f"WHERE EXISTS (SELECT 1 FROM fence) RETURNING {returning})"
    )


def _update(name: str, table: str, changes: dict[str, Any], where: str, params: list) -> str:
    sets = ", ".join(f"{c} = %s{_cast(c)}" for c in changes)
    params.extend(_value(c, v) for c, v in changes.items())
    return f"{name} AS (UPDATE {table} SET {sets} WHERE {where} RETURNING 1)"


def _write_statement(lease: Lease, step: Step, fast: bool) -> tuple:
    run = Run._meta.db_table
    params: list[Any] = [lease.run_id, lease.epoch]
    parts = [f"fence AS (SELECT id FROM {run} WHERE id = %s AND epoch = %s FOR SHARE)"]
    now = timezone.now()
    if step.events:
        rows = [_event_row(lease, event, now) for event in step.events]
        parts.append(_insert("ev", Event._meta.db_table, EVENT_COLUMNS, rows, params))
    if step.checkpoints:
        rows = [_checkpoint_row(lease, cp, now) for cp in step.checkpoints]
        parts.append(_insert("cp", Checkpoint._meta.db_table, CHECKPOINT_COLUMNS, rows, params))
    if step.new_invocations:
        rows = [{**row, "created_at": now} for row in step.new_invocations]
        parts.append(
            _insert("inv", ToolInvocation._meta.db_table, INVOCATION_COLUMNS, rows, params)
        )
    for index, (pk, changes) in enumerate(step.invocation_updates):
        parts.append(
            _update(
                f"up{index}",
                ToolInvocation._meta.db_table,
                changes,
                "id = %s AND EXISTS (SELECT 1 FROM fence)",
                params,
            )
        )
        params.append(pk)
    if step.run_update:
        parts.append(_update("run", run, step.run_update, "id = %s AND epoch = %s", params))
        params.extend([lease.run_id, lease.epoch])
    generation = CatalogGeneration._meta.db_table
    created = (
        "(SELECT json_agg(json_build_array(call_id, id)) FROM inv)"
        if step.new_invocations
        else "NULL"
    )
    relax = ", set_config('synchronous_commit', 'off', true)" if fast else ""
    sql = (
        "WITH "
        + ", ".join(parts)
        + f" SELECT (SELECT count(*) FROM fence), (SELECT cancel_requested FROM {run} "
        f"WHERE id = %s), (SELECT value FROM {generation} WHERE id = 1), {created}{relax}"
    )
    params.append(lease.run_id)
    return prepared(sql, params)


def _event_row(lease: Lease, event: Ev, now: Any) -> dict[str, Any]:
    return {
        "thread_id": lease.thread_id,
        "run_id": lease.run_id,
        "sequence": event.sequence,
        "type": event.type,
        "payload": event.payload,
        "created_at": now,
    }


def _checkpoint_row(lease: Lease, checkpoint: tuple, now: Any) -> dict[str, Any]:
    kind, last_sequence, state = checkpoint
    return {
        "run_id": lease.run_id,
        "kind": kind,
        "last_sequence": last_sequence,
        "state": state,
        "created_at": now,
    }


# ---- other databases: the same writes, one transaction --------------------------------


def _write_statements(lease: Lease, step: Step) -> dict[str, int]:
    fenced = Run.objects.select_for_update().filter(lease.fence)
    row = fenced.values_list("cancel_requested", flat=True).first()
    if row is None:
        _lost(lease)
    now = timezone.now()
    Event.objects.bulk_create(Event(**_event_row(lease, e, now)) for e in step.events)
    Checkpoint.objects.bulk_create(
        Checkpoint(**_checkpoint_row(lease, cp, now)) for cp in step.checkpoints
    )
    created = ToolInvocation.objects.bulk_create(
        ToolInvocation(**row, created_at=now) for row in step.new_invocations
    )
    for pk, changes in step.invocation_updates:
        ToolInvocation.objects.filter(pk=pk).update(**changes)
    if step.run_update and not Run.objects.filter(lease.fence).update(**step.run_update):
        _lost(lease)
    lease.cancel_requested = bool(row)
    lease.generation = CatalogGeneration.objects.values_list("value", flat=True).get(pk=1)
    return {invocation.call_id: invocation.pk for invocation in created}


def read(lease: Lease) -> tuple[list[Ev], dict[str, Any] | None]:
    """The thread's events in order and the run's newest checkpoint state."""
    if this_connection().vendor != "postgresql":
        thread = Event.objects.filter(thread_id=lease.thread_id).order_by("sequence")
        events = [Ev(*row) for row in thread.values_list("sequence", "type", "payload", "run_id")]
        latest = Checkpoint.objects.filter(run_id=lease.run_id).order_by("-id")
        return events, latest.values_list("state", flat=True).first()
    event, checkpoint = Event._meta.db_table, Checkpoint._meta.db_table
    rows = prepared_rows(
        f"SELECT sequence, type, payload::text, run_id FROM {event} WHERE thread_id = %s "
        f"UNION ALL SELECT NULL, NULL, (SELECT state::text FROM {checkpoint} WHERE run_id = %s "
        "ORDER BY id DESC LIMIT 1), NULL ORDER BY 1",
        [lease.thread_id, lease.run_id],
    )
    *logged, (_, _, state, _) = rows  # NULL sorts last: the checkpoint row
    events = [Ev(seq, kind, json.loads(payload), run_id) for seq, kind, payload, run_id in logged]
    return events, json.loads(state) if state else None
