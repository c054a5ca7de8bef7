"""The store on PostgreSQL: each of the loop's writes is ONE statement on the database
clock (runtime/journal.py says why a step is one statement and when it may skip the WAL
flush). Statuses are interpolated from `Run.Status`, never spelled in SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from functools import cache
from typing import Any
from uuid import UUID

import orjson
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import OrmQ

from agentruns.errors import Fenced
from agentruns.models import (
    CatalogGeneration,
    Checkpoint,
    DailyUsage,
    Event,
    GateAudit,
    Run,
    Ticket,
    ToolInvocation,
    WebhookDelivery,
)
from agentruns.store.base import SystemStore
from agentruns.store.connection import fast_commit
from agentruns.store.records import (
    CLAIM_FIELDS,
    Lease,
    Log,
    Step,
    Written,
    checkpoint_row,
    event_row,
)
from agentruns.store.statements import JsonText, prepared, prepared_rows

RUN = Run._meta.db_table
EVENT = Event._meta.db_table
CHECKPOINT = Checkpoint._meta.db_table
GENERATION = f"(SELECT value FROM {CatalogGeneration._meta.db_table} WHERE id = 1)"
# Appended to a statement that is its own transaction: that commit skips the WAL flush.
RELAX_COMMIT = ", set_config('synchronous_commit', 'off', true)"
QUEUED, RUNNING = f"'{Run.Status.QUEUED.value}'", f"'{Run.Status.RUNNING.value}'"
# base.claimable() in SQL.
CLAIMABLE = (
    f"(status = {QUEUED} OR (status = {RUNNING} AND "
    "(lease_expires_at IS NULL OR lease_expires_at < now())))"
)

JSON_COLUMNS = {
    "payload",
    "state",
    "arguments",
    "result",
    "failure",
    "forced_snippet_ids",
    "forced_skill_ids",
    "schema",
}
TIME_COLUMNS = {
    "created_at",
    "completed_at",
    "effect_sent_at",
    "lease_expires_at",
    "updated_at",
    "composed_at",
    "deadline",
}
UUID_COLUMNS = {"correlation_id"}
EVENT_COLUMNS = ("thread_id", "run_id", "sequence", "type", "payload", "created_at")
# What the step's inserts hand the CTEs after them: the events feed the webhook outbox.
RETURNING = {
    "inv": "id, call_id",
    "ev": "type AS event_type, run_id, thread_id, sequence, payload, created_at",
}
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
TICKET_COLUMNS = (
    "correlation_id",
    "run_id",
    "thread_id",
    "snapshot_id",
    "catalog_fingerprint",
    "deadline",
    "kind",
    "call_id",
    "tool",
    "arguments",
    "arguments_digest",
    "question",
    "schema",
    "status",
    "created_at",
)
AUDIT_COLUMNS = tuple(str(f.column) for f in GateAudit._meta.concrete_fields if not f.primary_key)


def _cast(column: str) -> str:
    if column in JSON_COLUMNS:
        return "::jsonb"
    if column in TIME_COLUMNS:
        return "::timestamptz"
    if column in UUID_COLUMNS:
        return "::uuid"
    return ""


def _value(column: str, value: Any) -> Any:
    if column in JSON_COLUMNS and value is not None:
        return _json(value)
    return value


def _json(value: Any) -> JsonText:
    """orjson, several times quicker than json on a step's payloads and checkpoint states;
    json for what orjson refuses (an integer past 64 bits, which a model may write)."""
    try:
        return JsonText(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
    except orjson.JSONEncodeError:
        return JsonText(json.dumps(value, default=_as_orjson_would).encode())


def _as_orjson_would(value: Any) -> Any:
    """The standard library's fallback writes what orjson writes natively (a step's rows
    carry times and UUIDs beside a model's values)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# OPS-4: the outbox rows of a step's events, written by the step's own statement.
OUTBOX = f"wh AS ({WebhookDelivery.insert_sql('ev AS e')} RETURNING 1)"

# Every row a step inserts is stamped by the statement itself, not with a parameter per
# row that Python formats and the server parses (PERF-1). The row builders the stores
# share are handed STAMPED_LATER for its value.
STAMPED = "created_at"
STAMP = "statement_timestamp()"
STAMPED_LATER = None


def _insert(name: str, model: Any, columns: tuple[str, ...], rows: list[dict], params: list) -> str:
    """A table's rows as ONE parameter, a JSON array of records (PERF-1): one orjson call
    instead of a formatted parameter per cell, and for the server one JSON parse and one
    function scan instead of a VALUES list of typed cells to bind and initialise. Its text
    does not depend on the number of rows, so a step has few shapes to prepare."""
    given = _given(columns)
    params.append(_json([{c: row[c] for c in given} for row in rows]))
    return _insert_sql(name, model._meta.db_table, columns, _record_types(model, given))


@cache
def _given(columns: tuple[str, ...]) -> tuple[str, ...]:
    """The columns a row sends: all but the one the statement stamps."""
    return tuple(c for c in columns if c != STAMPED)


@cache
def _record_types(model: Any, columns: tuple[str, ...]) -> str:
    """The record a row is read as: each column with its own type, so the server checks
    every value as the column would."""
    fields = {str(f.column): f for f in model._meta.concrete_fields}
    quote = connection.ops.quote_name
    return ", ".join(f"{quote(c)} {fields[c].db_type(connection)}" for c in columns)


@cache
def _insert_sql(name: str, table: str, columns: tuple[str, ...], record: str) -> str:
    names = ", ".join(columns)
    values = ", ".join(STAMP if c == STAMPED else c for c in columns)
    returning = RETURNING.get(name, "1")
    return (
        f"{name} AS (INSERT INTO {table} ({names}) SELECT {values} FROM "
        f"jsonb_to_recordset(%s::jsonb) AS v ({record}) "
        f"WHERE EXISTS (SELECT 1 FROM fence) RETURNING {returning})"
    )


def _update(name: str, table: str, changes: dict[str, Any], where: str, params: list) -> str:
    params.extend(_value(c, v) for c, v in changes.items())
    return _update_sql(name, table, tuple(changes), where)


@cache
def _update_sql(name: str, table: str, columns: tuple[str, ...], where: str) -> str:
    sets = ", ".join(f"{c} = %s{_cast(c)}" for c in columns)
    return f"{name} AS (UPDATE {table} SET {sets} WHERE {where} RETURNING 1)"


def step_statement(lease: Lease, step: Step, fast: bool) -> tuple:
    """The whole step (and the audit rows of the send after it) as data-modifying CTEs
    behind a `FOR SHARE` fence on the run row; returns (fence held, cancel flag, catalog
    generation, [[call_id, invocation id]], the configuration's tokens today if the step
    used any)."""
    params: list[Any] = [lease.run_id, lease.epoch]
    used_params: list[Any] = []
    held = ""
    if step.after:
        held = f" AND EXISTS (SELECT 1 FROM {EVENT} WHERE thread_id = %s AND sequence = %s)"
        params.extend([lease.thread_id, step.after])
    parts = [f"fence AS (SELECT id FROM {RUN} WHERE id = %s AND epoch = %s{held} FOR SHARE)"]
    if step.events:
        rows = [event_row(lease, event, STAMPED_LATER) for event in step.events]
        parts.append(_insert("ev", Event, EVENT_COLUMNS, rows, params))
        # OPS-4: the outbox in the same statement (a join against an empty table when
        # nobody subscribed); OPS-1: the day's counter, only when the step used tokens.
        parts.append(OUTBOX)
        spent_in, spent_out = DailyUsage.usage_of(step.events)
        if spent_in or spent_out:
            parts.append(f"du AS ({DailyUsage.UPSERT_SQL})")
            upsert, used_params = DailyUsage.upsert_params(
                lease.configuration_id, lease.run_id, spent_in, spent_out
            )
            params.extend(upsert)
    if step.checkpoints:
        rows = [checkpoint_row(lease, cp, STAMPED_LATER) for cp in step.checkpoints]
        parts.append(_insert("cp", Checkpoint, CHECKPOINT_COLUMNS, rows, params))
    if step.new_invocations:
        invocations = step.new_invocations
        parts.append(_insert("inv", ToolInvocation, INVOCATION_COLUMNS, invocations, params))
    if step.new_ticket is not None:
        row = {**step.new_ticket, "status": Ticket.Status.ACTIVE}
        parts.append(_insert("tk", Ticket, TICKET_COLUMNS, [row], params))
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
    if step.audits:
        parts.append(_insert("au", GateAudit, AUDIT_COLUMNS, step.audits, params))
    if step.run_update:
        parts.append(_update("run", RUN, step.run_update, "id = %s AND epoch = %s", params))
        params.extend([lease.run_id, lease.epoch])
    used = DailyUsage.USED_SQL if used_params else "NULL"
    created = (
        "(SELECT json_agg(json_build_array(call_id, id)) FROM inv)"
        if step.new_invocations
        else "NULL"
    )
    sql = (
        "WITH "
        + ", ".join(parts)
        + f" SELECT (SELECT count(*) FROM fence), (SELECT cancel_requested FROM {RUN} "
        f"WHERE id = %s), {GENERATION}, {created}, {used}{RELAX_COMMIT if fast else ''}"
    )
    params.extend([lease.run_id, *used_params])
    return prepared(sql, params)


def _log_sql(thread_id: str, run_id: str) -> str:
    """Two columns: the thread's log as one JSON array and the run's newest checkpoint
    state, for `_log` to decode (one value each, not a row per event)."""
    return (
        "(SELECT json_agg(json_build_array(e.sequence, e.type, e.payload, e.run_id) ORDER BY "
        f"e.sequence)::text FROM {EVENT} AS e WHERE e.thread_id = {thread_id}), "
        f"(SELECT c.state::text FROM {CHECKPOINT} AS c WHERE c.run_id = {run_id} "
        "ORDER BY c.id DESC LIMIT 1)"
    )


def _log(events: str | None, state: str | None) -> Log:
    rows = [(seq, kind, payload, run) for seq, kind, payload, run in orjson.loads(events or "[]")]
    return rows, orjson.loads(state) if state else None


def _claim_rows(
    where: str, params: list[Any], owner: str, seconds: float, *, per_run: bool = False
) -> list[tuple[int, dict]]:
    """Claims only make the run claimable again if a database crash loses them, so their
    commit need not wait for the WAL flush. A claimed run needs no wake-up: the statement
    deletes its waiting one, so a batch claim spares the cluster a wake-up per run it took
    (a wake-up already taken finds its run claimed and does nothing, CLU-1). It reads each
    run's log too, as the executor's first read would, a statement later (PERF-4).

    The claim of one run by its id starts every drive, so it is prepared like a step:
    parsing and planning it each time cost its backend ~1.2 ms, a fifth of a three-turn
    run's backend CPU. A batch claim, once per up to CLAIM_BATCH runs, is planned for its
    LIMIT each time, as a generic plan could not be."""
    fields = ", ".join(CLAIM_FIELDS)
    columns = ", ".join(f"old.{c}" for c in CLAIM_FIELDS)
    log = _log_sql("claimed.thread_id", "claimed.id")
    sql = (
        f"WITH claimed AS (UPDATE {RUN} AS r SET status = {RUNNING}, epoch = r.epoch + 1, "
        "lease_owner = %s, lease_expires_at = now() + %s * interval '1 second', "
        f"attempts = r.attempts + (CASE WHEN r.status = {RUNNING} THEN 1 ELSE 0 END), "
        "wake_queue_id = NULL "
        f"FROM (SELECT {fields}, composed_at, wake_queue_id, id FROM {RUN} "
        f"WHERE {where} FOR UPDATE SKIP LOCKED) "
        f"AS old WHERE r.id = old.id RETURNING old.id, {columns}, old.composed_at, "
        f"old.wake_queue_id), woken AS (DELETE FROM {OrmQ._meta.db_table} "
        "WHERE id IN (SELECT wake_queue_id FROM claimed)) "
        f"SELECT id, {fields}, composed_at IS NOT NULL, {GENERATION}, {log}"
        + (RELAX_COMMIT if fast_commit(False) else "")
        + " FROM claimed"
    )
    args = [owner, seconds, *params]
    found = prepared_rows(sql, args) if per_run else _cursor_rows(sql, args)
    names = [*CLAIM_FIELDS, "composed", "generation"]
    claimed = []
    for run_id, *values in found:
        row = dict(zip(names, values[: len(names)], strict=True))
        row["log"] = _log(*values[len(names) : len(names) + 2])
        for key in ("forced_snippet_ids", "forced_skill_ids"):
            if isinstance(row[key], str):  # Django's cursor leaves jsonb as its text
                row[key] = json.loads(row[key])
        claimed.append((run_id, row))
    return claimed


def _cursor_rows(sql: str, params: list[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


class PostgresStore(SystemStore):
    skip_locked = True

    def write_step(self, lease: Lease, step: Step, *, durable: bool) -> Written:
        row = step_statement(lease, step, fast_commit(durable))
        held, cancel, generation, created, used = row[:5]  # then set_config's, if relaxed
        if not held:
            raise Fenced("the lease was taken by another worker, or the log lost its steps")
        return Written(
            invocations={call_id: pk for call_id, pk in (created or [])},
            cancel_requested=bool(cancel),
            generation=generation,
            used_today=None if used is None else (DailyUsage.today(), int(used)),
        )

    def read_log(self, thread_id: int, run_id: int) -> Log:
        return _log(*prepared(f"SELECT {_log_sql('%s', '%s')}", [thread_id, run_id]))

    def claim(self, run_id: int, owner: str, seconds: float) -> dict | None:
        rows = _claim_rows(f"id = %s AND {CLAIMABLE}", [run_id], owner, seconds, per_run=True)
        return rows[0][1] if rows else None

    def claim_queued(self, limit: int, owner: str, seconds: float) -> list[tuple[int, dict]]:
        where = f"status = {QUEUED} ORDER BY id LIMIT %s"
        return _claim_rows(where, [limit], owner, seconds)

    def renew_many(self, leases: list[Lease], seconds: float) -> dict[int, bool]:
        sql = (
            f"UPDATE {RUN} AS r SET lease_expires_at = now() + %s * interval '1 second' "
            "FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::bigint[]) AS epoch) AS held "
            f"WHERE r.id = held.id AND r.epoch = held.epoch AND r.status = {RUNNING} "
            "RETURNING r.id, r.cancel_requested"
        )
        params: list[Any] = [
            seconds,
            [lease.run_id for lease in leases],
            [lease.epoch for lease in leases],
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return dict(cursor.fetchall())

    def claim_expired(self, limit: int, owner: str, seconds: float) -> list[tuple[int, dict]]:
        where = (
            f"status = {RUNNING} AND (lease_expires_at IS NULL OR lease_expires_at < now()) "
            "ORDER BY lease_expires_at NULLS FIRST LIMIT %s"
        )
        return _claim_rows(where, [limit], owner, seconds)

    def queue_deliveries(self, events: Sequence[Event]) -> None:
        row = "(%s, %s::bigint, %s::bigint, %s::integer, %s::jsonb, %s::timestamptz)"
        params: list[Any] = []
        for event in events:
            params += [
                event.type,
                event.run_id,
                event.thread_id,
                event.sequence,
                json.dumps(event.payload),
                event.created_at,
            ]
        columns = ", ".join(WebhookDelivery.SOURCE_COLUMNS)
        values = ", ".join([row] * len(events))
        sql = WebhookDelivery.insert_sql(f"(VALUES {values}) AS e ({columns})")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    def dequeue_tasks(self, list_key: str, limit: int, lock_secs: float) -> list[tuple[int, str]]:
        now = timezone.now()
        table = OrmQ._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET lock = %s WHERE id IN (SELECT id FROM {table} "
                "WHERE key = %s AND lock < %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
                "RETURNING id, payload",
                [now + timedelta(seconds=lock_secs), list_key, now, limit],
            )
            return sorted(cursor.fetchall())

    def database_now(self) -> datetime:
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]

    def make_durable(self) -> None:
        # A transaction that is assigned an xid and commits with synchronous_commit on waits
        # for the WAL flush past its own commit record, hence past every earlier commit.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = on")
            cursor.execute("SELECT txid_current()")

    def client_connections(self) -> int | None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            )
            return int(cursor.fetchone()[0])
