"""A durable step as ONE statement on PostgreSQL (runtime/journal.py says why): its rows
as data-modifying CTEs behind a `FOR SHARE` fence on the run row, each table's rows one
JSON parameter, every row stamped by the statement, prepared once per connection and
shape (`statements.prepared`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime
from functools import cache
from typing import Any
from uuid import UUID

import orjson
from django.db import connection

from agentruns.models import (
    CatalogGeneration,
    Checkpoint,
    DailyUsage,
    Event,
    GateAudit,
    Run,
    Ticket,
    ToolInvocation,
    Webhook,
)
from agentruns.store.ops_sql import USAGE_UPSERT, USAGE_USED, delivery_insert, usage_params
from agentruns.store.records import Lease, Step, checkpoint_row, event_row
from agentruns.store.rows import INVOCATION_COLUMNS as NEW_INVOCATION_COLUMNS
from agentruns.store.rows import StepResult
from agentruns.store.statements import JsonText, prepared

RUN = Run._meta.db_table
EVENT = Event._meta.db_table
CHECKPOINT = Checkpoint._meta.db_table
GENERATION = f"(SELECT value FROM {CatalogGeneration._meta.db_table} WHERE id = 1)"
# Appended to a statement that is its own transaction: that commit skips the WAL flush.
RELAX_COMMIT = ", set_config('synchronous_commit', 'off', true)"

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
BIGINT_MAX = 2**63 - 1
EVENT_COLUMNS = ("thread_id", "run_id", "sequence", "type", "payload", "created_at")
# What the step's inserts hand the CTEs after them: the events feed the webhook outbox.
RETURNING = {
    "inv": "id, call_id",
    "ev": "type AS event_type, run_id, thread_id, sequence, payload, created_at",
}
CHECKPOINT_COLUMNS = ("run_id", "kind", "last_sequence", "state", "created_at")
INVOCATION_COLUMNS = (*NEW_INVOCATION_COLUMNS, "created_at")
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
    "child_id",
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
OUTBOX = f"wh AS ({delivery_insert('ev AS e')} RETURNING 1)"
SUBSCRIBED = f"EXISTS (SELECT 1 FROM {Webhook._meta.db_table} WHERE active)"


class Subscribers:
    """Whether any webhook is active, as this process's latest step statement saw it.
    While none is, a step leaves the outbox CTE out (an insert into a table of four
    indexes that writes nothing, ~8 % of the server's time for a step) and fences itself
    on there still being none: a webhook activated since makes that step write nothing,
    and it is written again with the outbox. What a step commits is the same either way;
    this is only which statement says it, so threads may race on it."""

    seen = True  # until a statement says otherwise


# Every row a step inserts is stamped by the statement itself, not with a parameter per
# row that Python formats and the server parses (PERF-1). The row builders the stores
# share are handed STAMPED_LATER for its value.
STAMPED = "created_at"
STAMP = "statement_timestamp()"
STAMPED_LATER = None


def _insert(
    name: str,
    model: Any,
    columns: tuple[str, ...],
    rows: Sequence[dict[str, Any]],
    params: list[Any],
) -> str:
    """A table's rows as ONE parameter, a JSON array of records (PERF-1): one orjson call
    instead of a formatted parameter per cell, and for the server one JSON parse and one
    function scan instead of a VALUES list of typed cells to bind and initialise. Its text
    does not depend on the number of rows, so a step has few shapes to prepare."""
    given = _given(columns)
    return _insert_given(name, model, columns, [{c: row[c] for c in given} for row in rows], params)


def _insert_given(
    name: str, model: Any, columns: tuple[str, ...], rows: list[dict[str, Any]], params: list[Any]
) -> str:
    """`_insert` of rows that hold exactly the columns a row sends (a typed row's `row()`)."""
    params.append(_json(rows))
    return _insert_statement(name, model, columns)


@cache
def _insert_statement(name: str, model: Any, columns: tuple[str, ...]) -> str:
    return _insert_sql(name, model._meta.db_table, columns, _record_types(model, _given(columns)))


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


def _update(name: str, table: str, changes: dict[str, Any], where: str, params: list[Any]) -> str:
    params.extend(_value(c, v) for c, v in changes.items())
    return _update_sql(name, table, tuple(changes), where)


@cache
def _update_sql(name: str, table: str, columns: tuple[str, ...], where: str) -> str:
    sets = ", ".join(f"{c} = %s{_cast(c)}" for c in columns)
    return f"{name} AS (UPDATE {table} SET {sets} WHERE {where} RETURNING 1)"


def _invocation_updates(updates: list[tuple[int, dict[str, Any]]], params: list[Any]) -> list[str]:
    """The step's invocation changes as rows of one JSON parameter per set of columns they
    change (one set, as a rule: a batch's completions), like its inserts. An invocation
    changed twice within a step (held steps merged) is one row with its later values:
    two changes of one row in one statement would leave only one of them."""
    merged: dict[int, dict[str, Any]] = {}
    for pk, changes in updates:
        merged.setdefault(pk, {}).update(changes)
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for pk, changes in merged.items():
        by_columns.setdefault(tuple(sorted(changes)), []).append({"id": pk, **changes})
    parts = []
    for index, (columns, rows) in enumerate(by_columns.items()):
        params.append(_json(rows))
        parts.append(_updates_sql(f"up{index}", columns))
    return parts


# The planner guesses 100 rows for any `jsonb_to_recordset`, and for 100 lookups it reads
# the whole invocation table into a hash while that holds up to some thousands of rows,
# statistics or none (0.6 ms at 3,000 rows against 0.06 by key); a plan prepared then is
# kept while the table grows, for the connection's life where nothing analyses it. A range
# every id is in, which it guesses keeps 0.5 % of rows, makes its guess one row, found by key.
@cache
def _updates_sql(name: str, columns: tuple[str, ...]) -> str:
    record = _record_types(ToolInvocation, ("id", *columns))
    sets = ", ".join(f"{c} = v.{c}" for c in columns)
    return (
        f"{name} AS (UPDATE {ToolInvocation._meta.db_table} AS t SET {sets} FROM "
        f"jsonb_to_recordset(%s::jsonb) AS v ({record}) "
        f"WHERE t.id = v.id AND v.id BETWEEN 1 AND {BIGINT_MAX} "
        "AND EXISTS (SELECT 1 FROM fence) RETURNING 1)"
    )


def step_statement(lease: Lease, step: Step, *, fast: bool, count_today: bool) -> StepResult:
    """The whole step (and the audit rows of the send after it) as data-modifying CTEs
    behind a `FOR SHARE` fence on the run row; the tokens today only if the step used any
    and `count_today` asks. `fast`: its commit does not wait for the WAL flush (only a
    statement that is its own transaction)."""
    params: list[Any] = [lease.run_id, lease.epoch]
    used_params: list[Any] = []
    held = ""
    if step.after:
        held = f" AND EXISTS (SELECT 1 FROM {EVENT} WHERE thread_id = %s AND sequence = %s)"
        params.extend([lease.thread_id, step.after])
    unsubscribed = bool(step.events) and not Subscribers.seen
    if unsubscribed:
        held += f" AND NOT {SUBSCRIBED}"
    # The fence's own row brings the cancel flag (HITL-11), as fresh as its lock made it.
    fence = f"SELECT id, cancel_requested FROM {RUN} WHERE id = %s AND epoch = %s{held}"
    parts = [f"fence AS ({fence} FOR SHARE)"]
    if step.events:
        rows = [event_row(lease, event, STAMPED_LATER) for event in step.events]
        parts.append(_insert("ev", Event, EVENT_COLUMNS, rows, params))
        # OPS-4: the outbox in the same statement while anybody subscribed; OPS-1: the
        # day's counter, only when the step used tokens.
        if not unsubscribed:
            parts.append(OUTBOX)
        spent_in, spent_out = DailyUsage.usage_of(step.events)
        if spent_in or spent_out:
            parts.append(f"du AS ({USAGE_UPSERT})")
            upsert, total = usage_params(lease.configuration_id, lease.run_id, spent_in, spent_out)
            params.extend(upsert)
            used_params = total if count_today else []
    if step.checkpoints:
        rows = [checkpoint_row(lease, cp, STAMPED_LATER) for cp in step.checkpoints]
        parts.append(_insert("cp", Checkpoint, CHECKPOINT_COLUMNS, rows, params))
    changed = step.rows
    if changed.new_invocations:
        rows = [invocation.row() for invocation in changed.new_invocations]
        parts.append(_insert_given("inv", ToolInvocation, INVOCATION_COLUMNS, rows, params))
    if changed.new_tickets:
        rows = [{**ticket.row(), "status": Ticket.Status.ACTIVE} for ticket in changed.new_tickets]
        parts.append(_insert("tk", Ticket, TICKET_COLUMNS, rows, params))
    changes = [(change.pk, change.changes()) for change in changed.invocation_updates]
    parts.extend(_invocation_updates(changes, params))
    if step.audits:
        parts.append(_insert("au", GateAudit, AUDIT_COLUMNS, step.audits, params))
    if changed.run_update is not None:
        fenced = "id = %s AND epoch = %s" + (f" AND NOT {SUBSCRIBED}" if unsubscribed else "")
        parts.append(_update("run", RUN, changed.run_update.columns(), fenced, params))
        params.extend([lease.run_id, lease.epoch])
    used = USAGE_USED if used_params else "NULL"
    created = (
        "(SELECT json_agg(json_build_array(call_id, id)) FROM inv)"
        if changed.new_invocations
        else "NULL"
    )
    sql = (
        "WITH "
        + ", ".join(parts)
        + " SELECT (SELECT count(*) FROM fence), (SELECT cancel_requested FROM fence), "
        f"{GENERATION}, {created}, {used}, {SUBSCRIBED}"
        f"{RELAX_COMMIT if fast else ''}"
    )
    params.extend(used_params)
    result = StepResult(*prepared(sql, params)[:6])  # then set_config's, if fast
    Subscribers.seen = result.subscribed
    if unsubscribed and result.subscribed and not result.held:
        # A webhook came: the step again, with the outbox.
        return step_statement(lease, step, fast=fast, count_today=count_today)
    return result
