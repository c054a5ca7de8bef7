"""The store on PostgreSQL: each of the loop's writes is ONE statement on the database
clock (runtime/journal.py says why a step is one statement and when it may skip the WAL
flush). Statuses are interpolated from `Run.Status`, never spelled in SQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from django.db import connection, transaction
from django_q.models import OrmQ

from agentruns.errors import Fenced
from agentruns.models import (
    DailyUsage,
    Event,
    Run,
)
from agentruns.store.base import SystemStore
from agentruns.store.connection import fast_commit
from agentruns.store.ops_sql import SOURCE_COLUMNS, delivery_insert
from agentruns.store.records import (
    CLAIM_FIELDS,
    ClaimRow,
    Lease,
    Log,
    Step,
    Written,
)
from agentruns.store.statements import Row, prepared, prepared_rows
from agentruns.store.steps import (
    CHECKPOINT,
    EVENT,
    GENERATION,
    RELAX_COMMIT,
    RUN,
    step_statement,
)

QUEUED, RUNNING = f"'{Run.Status.QUEUED.value}'", f"'{Run.Status.RUNNING.value}'"
# base.claimable() in SQL.
CLAIMABLE = (
    f"(status = {QUEUED} OR (status = {RUNNING} AND "
    "(lease_expires_at IS NULL OR lease_expires_at < now())))"
)


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
    where: str,
    params: list[Any],
    owner: str,
    seconds: float,
    *,
    per_run: bool = False,
    spends_attempt: bool = True,
) -> list[tuple[int, ClaimRow]]:
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
    # A running run's claim is a crash reclaim (CLU-3), unless it only takes again what an
    # unanswered claim of this process took.
    spent = f"(CASE WHEN r.status = {RUNNING} THEN 1 ELSE 0 END)" if spends_attempt else "0"
    log = _log_sql("claimed.thread_id", "claimed.id")
    sql = (
        f"WITH claimed AS (UPDATE {RUN} AS r SET status = {RUNNING}, epoch = r.epoch + 1, "
        "lease_owner = %s, lease_expires_at = now() + %s * interval '1 second', "
        f"attempts = r.attempts + {spent}, "
        "wake_queue_id = NULL "
        f"FROM (SELECT {fields}, composed_at, wake_queue_id, id FROM {RUN} "
        f"WHERE {where} FOR UPDATE SKIP LOCKED) "
        f"AS old WHERE r.id = old.id RETURNING old.id, {columns}, old.composed_at, "
        "old.wake_queue_id, r.attempts - old.attempts AS spent), "
        f"woken AS (DELETE FROM {OrmQ._meta.db_table} "
        "WHERE id IN (SELECT wake_queue_id FROM claimed)) "
        f"SELECT id, {fields}, composed_at IS NOT NULL, {GENERATION}, spent, {log}"
        + (RELAX_COMMIT if fast_commit(False) else "")
        + " FROM claimed"
    )
    args = [owner, seconds, *params]
    found = prepared_rows(sql, args) if per_run else _cursor_rows(sql, args)
    names = [*CLAIM_FIELDS, "composed", "generation", "spent"]
    claimed = []
    for run_id, *values in found:
        row = dict(zip(names, values[: len(names)], strict=True))
        row["log"] = _log(*values[len(names) : len(names) + 2])
        for key in ("forced_snippet_ids", "forced_skill_ids"):
            if isinstance(row[key], str):  # Django's cursor leaves jsonb as its text
                row[key] = json.loads(row[key])
        claimed.append((run_id, row))
    return claimed


def _cursor_rows(sql: str, params: list[Any]) -> list[Row]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[Row] = cursor.fetchall()
        return rows


class PostgresStore(SystemStore):
    skip_locked = True

    def write_step(self, lease: Lease, step: Step, *, durable: bool, count_today: bool) -> Written:
        row = step_statement(lease, step, fast=fast_commit(durable), count_today=count_today)
        if not row.held:
            raise Fenced("the lease was taken by another worker, or the log lost its steps")
        used = row.used_today
        return Written(
            invocations={call_id: pk for call_id, pk in (row.created or [])},
            cancel_requested=bool(row.cancel_requested),
            generation=row.generation,
            used_today=None if used is None else (DailyUsage.today(), int(used)),
        )

    def read_log(self, thread_id: int, run_id: int) -> Log:
        return _log(*prepared(f"SELECT {_log_sql('%s', '%s')}", [thread_id, run_id]))

    def claim(self, run_id: int, owner: str, seconds: float) -> ClaimRow | None:
        rows = _claim_rows(f"id = %s AND {CLAIMABLE}", [run_id], owner, seconds, per_run=True)
        return rows[0][1] if rows else None

    def claim_queued(self, limit: int, owner: str, seconds: float) -> list[tuple[int, ClaimRow]]:
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

    def claim_unanswered(
        self, owners: list[str], limit: int, owner: str, seconds: float
    ) -> list[tuple[int, ClaimRow]]:
        where = f"status = {RUNNING} AND lease_owner = ANY(%s) ORDER BY id LIMIT %s"
        return _claim_rows(where, [owners, limit], owner, seconds, spends_attempt=False)

    def claim_expired(self, limit: int, owner: str, seconds: float) -> list[tuple[int, ClaimRow]]:
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
        columns = ", ".join(SOURCE_COLUMNS)
        values = ", ".join([row] * len(events))
        sql = delivery_insert(f"(VALUES {values}) AS e ({columns})")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)

    def dequeue_tasks(self, list_key: str, limit: int, lock_secs: float) -> list[tuple[int, str]]:
        # On the database's clock, like the leases (PERF-12): a host whose clock ran five
        # minutes behind took no wake-up for five minutes; one ahead took back, at once,
        # the wake-ups other hosts had just taken.
        table = OrmQ._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET lock = now() + %s * interval '1 second' WHERE id IN "
                f"(SELECT id FROM {table} WHERE key = %s AND lock < now() ORDER BY id "
                "LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, payload",
                [lock_secs, list_key, limit],
            )
            return sorted(cursor.fetchall())

    def database_now(self) -> datetime:
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            now: datetime = cursor.fetchone()[0]
            return now

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
