"""Seeding a benchmark database fast: one `INSERT … SELECT` over `generate_series` per table.

The column list of every insert comes from the models, so a column a migration adds (with
a default) or drops never breaks a seed; a new NOT NULL column without a default fails
loudly, naming it (the benchmarks' smoke tests run this code on every schema).

The seeded history is a year of finished work, newest last, the way production fills up:
run i of n was created (n - i) / n * `days` ago, most complete, some fail or are cancelled,
the newest `awaiting` park on an active ticket. Every 20th run had a ticket decided and
every 100th a redaction, so the audit export has something to find (OPS-5).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection, models, transaction

from agentruns import events as ev
from agentruns.models import (
    Checkpoint,
    Configuration,
    Event,
    GateAudit,
    Run,
    Thread,
    Ticket,
    ToolInvocation,
)

DECIDED_EVERY = 20  # a run in 20 had a ticket decided (permission, allowed)
REDACTED_EVERY = 100  # a run in 100 had a secret redacted from its input
FAILED_EVERY = 50
CANCELLED_EVERY = 97
UNCERTAIN_EVERY = 100_000  # a write whose outcome is unknown (TOOL-4): the inbox lists them


class SeedError(RuntimeError):
    pass


def column_default(field: Any) -> tuple[str, list[Any]]:
    """SQL (and its parameters) for a column the seed gives no value."""
    if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
        return "now()", []
    if field.has_default() or (field.empty_strings_allowed and not field.null):
        return "%s", [field.get_db_prep_save(field.get_default(), connection)]
    if field.null:
        return "NULL", []
    raise SeedError(
        f"{field.model._meta.db_table}.{field.column} is NOT NULL without a default: "
        "give agentruns/bench/seed.py a value for it"
    )


def insert_select(
    model: type[models.Model],
    values: Mapping[str, str | tuple[str, Sequence[Any]]],
    source: str,
    params: Sequence[Any] = (),
) -> int:
    """INSERT INTO model's table SELECT … FROM `source`: `values` maps column names to SQL
    expressions over the source (alone, or with their parameters); every other column (the
    primary key aside) gets its field's default. A literal % in the SQL is written %%.
    Returns the number of rows inserted."""
    columns: list[str] = []
    expressions: list[str] = []
    arguments: list[Any] = []
    fields = {str(field.column): field for field in model._meta.concrete_fields}
    unknown = set(values) - set(fields)
    if unknown:
        raise SeedError(f"{model._meta.db_table} has no column {sorted(unknown)}")
    for column, field in fields.items():
        if column in values:
            given = values[column]
            sql, extra = (given, []) if isinstance(given, str) else given
        elif field.primary_key or field.generated:  # the database computes those
            continue
        else:
            sql, extra = column_default(field)
        columns.append(connection.ops.quote_name(column))
        expressions.append(sql)
        arguments.extend(extra)
    statement = (
        f"INSERT INTO {model._meta.db_table} ({', '.join(columns)}) "
        f"SELECT {', '.join(expressions)} FROM {source}"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*arguments, *params])
        return cursor.rowcount


@contextmanager
def indexes_rebuilt(*tables: str) -> Iterator[None]:
    """Bulk loading is several times faster without the tables' secondary indexes, unique
    and foreign-key constraints; they are dropped and rebuilt (and so checked) at the end,
    in the caller's transaction, so a failed seed leaves the schema as it was."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
            "FROM pg_constraint WHERE contype IN ('u', 'f') AND conrelid::regclass::text = "
            "ANY(%s)",
            [list(tables)],
        )
        constraints = cursor.fetchall()
        for table, name, _ in constraints:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid::regclass::text = ANY(%s) AND NOT i.indisprimary",
            [list(tables)],
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX {name}")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            cursor.execute(definition)
        for table, name, definition in constraints:
            cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')


@dataclass(frozen=True)
class History:
    """What to seed: `runs` runs of `events_per_run` events over `days`, one thread each."""

    runs: int
    events_per_run: int = 10
    days: float = 365.0
    active_tickets: int = 20
    invocations_per_run: int = 1

    def __post_init__(self) -> None:
        if self.events_per_run < 4:
            raise SeedError("a seeded run has at least 4 events (user, turn, result, end)")


def _max_id(model: type[models.Model]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {model._meta.db_table}")
        return int(cursor.fetchone()[0])


def _numbered(model: type[models.Model], after: int, alias: str) -> str:
    """The rows of `model` with ids above `after`, each with its ordinal `i` (1..n)."""
    table = model._meta.db_table
    return (
        f"(SELECT x.*, row_number() OVER (ORDER BY x.id) AS i FROM {table} x "
        f"WHERE x.id > {after}) {alias}"
    )


def seed_history(
    history: History,
    *,
    configuration_ids: Sequence[int],
    user_ids: Sequence[int | None],
    rebuild_indexes: bool = False,
) -> dict[str, int]:
    """Seed `history` in one transaction; returns the rows inserted per table."""
    models_seeded = (Thread, Run, Event, Checkpoint, ToolInvocation, Ticket, GateAudit)
    tables = [m._meta.db_table for m in models_seeded]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit = off")
        if rebuild_indexes:
            with indexes_rebuilt(*tables):
                counts = _seed(history, list(configuration_ids), list(user_ids))
        else:
            counts = _seed(history, list(configuration_ids), list(user_ids))
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {', '.join(tables)}")
    return counts


def _seed(history: History, configurations: list[int], users: list[int | None]) -> dict[str, int]:
    n, per_run = history.runs, history.events_per_run
    thread_base, run_base = _max_id(Thread), _max_id(Run)
    spacing = history.days * 86400 / max(n, 1)
    counts = {
        "threads": insert_select(
            Thread,
            {
                "configuration_id": (
                    "(%s::bigint[])[1 + i %% %s]",
                    [configurations, len(configurations)],
                ),
                "created_by_id": ("(%s::bigint[])[1 + i %% %s]", [users, len(users)]),
                "created_at": f"now() - (({n} - i) * interval '{spacing:.6f} seconds')",
            },
            f"generate_series(1, {n}) i",
        )
    }
    status = (
        f"CASE WHEN t.i > {n - history.active_tickets} THEN 'awaiting' "
        f"WHEN t.i %% {CANCELLED_EVERY} = 0 THEN 'cancelled' "
        f"WHEN t.i %% {FAILED_EVERY} = 0 THEN 'failed' ELSE 'completed' END"
    )
    counts["runs"] = insert_select(
        Run,
        {
            "thread_id": "t.id",
            "configuration_id": "t.configuration_id",
            "created_by_id": "t.created_by_id",
            "input": "'seeded task ' || t.i",
            "status": status,
            "created_at": "t.created_at",
            "updated_at": "t.created_at + interval '1 minute'",
            "final_reply": "'done'",
            "epoch": "1",
            "attempts": "1",
            "turns": str(per_run // 2),
            "tool_calls_used": str(history.invocations_per_run),
            "last_sequence": str(per_run),
        },
        _numbered(Thread, thread_base, "t"),
    )
    runs = _numbered(Run, run_base, "r")
    counts["events"] = _seed_events(runs, per_run)
    counts["checkpoints"] = insert_select(
        Checkpoint,
        {
            "run_id": "r.id",
            "kind": "CASE WHEN r.status = 'awaiting' THEN 'suspension' ELSE 'terminal' END",
            "last_sequence": str(per_run),
            "state": f"'{{\"last_sequence\": {per_run}}}'::jsonb",
            "created_at": "r.updated_at",
        },
        runs,
    )
    uncertain = f"r.i %% {UNCERTAIN_EVERY} = 7"
    counts["invocations"] = insert_select(
        ToolInvocation,
        {
            "run_id": "r.id",
            "turn_index": "g",
            "call_id": "'call_' || g",
            "tool": "'clock.now'",
            "tool_version": "'1'",
            "arguments": "'{}'::jsonb",
            "arguments_digest": "md5(r.id || '/' || g)",
            "idempotency_key": "md5('seed/' || r.id || '/' || g)",
            "status": f"CASE WHEN {uncertain} THEN 'uncertain' ELSE 'completed' END",
            "effect_sent_at": "r.created_at",
            "result": '\'{"status": "ok"}\'::jsonb',
            "created_at": "r.created_at",
            "completed_at": "r.created_at",
        },
        f"{runs}, generate_series(1, {history.invocations_per_run}) g",
    )
    counts["tickets"] = _seed_tickets(runs)
    counts["gate_audit"] = insert_select(
        GateAudit,
        {
            "created_at": "r.created_at",
            "verdict": "CASE WHEN r.i %% 100 = 3 THEN 'refused' ELSE 'permitted' END",
            "enforcement": "'enforced'",
            "configuration": "c.slug",
            "run_id": "r.id",
            "zone": "'local'",
            "ceiling": "'internal'",
            "source_kind": "'system'",
            "source_name": "'system prompt'",
            "data_class": "'internal'",
        },
        f"{runs} JOIN agentruns_configuration c ON c.id = r.configuration_id",
    )
    return counts


def _seed_events(runs: str, per_run: int) -> int:
    terminal = (
        "CASE r.status WHEN 'awaiting' THEN %s WHEN 'failed' THEN %s "
        "WHEN 'cancelled' THEN %s ELSE %s END"
    )
    kind = (
        f"CASE WHEN g = 1 THEN %s WHEN g = {per_run} THEN {terminal} "
        f"WHEN g = 2 AND r.i %% {DECIDED_EVERY} = 0 THEN %s "
        f"WHEN g = 3 AND r.i %% {REDACTED_EVERY} = 0 THEN %s "
        "WHEN g %% 2 = 0 THEN %s ELSE %s END"
    )
    kinds = [
        ev.USER,
        ev.TICKET_OPENED,
        ev.RUN_FAILED,
        ev.RUN_CANCELLED,
        ev.RUN_COMPLETED,
        ev.TICKET_DECIDED,
        ev.SECRET_REDACTED,
        ev.ASSISTANT,
        ev.TOOL_RESULT,
    ]
    payload = (
        "jsonb_build_object('text', 'seeded event ' || g || ' of run ' || r.id, 'step', g, "
        "'by', 'bench', 'decision', 'allow', 'where', 'input', 'kinds', '[\"api_key\"]'::jsonb)"
    )
    return insert_select(
        Event,
        {
            "thread_id": "r.thread_id",
            "run_id": "r.id",
            "sequence": "g",
            "type": (kind, kinds),
            "payload": payload,
            "created_at": "r.created_at + g * interval '1 second'",
        },
        f"{runs}, generate_series(1, {per_run}) g",
    )


def _seed_tickets(runs: str) -> int:
    """An answered ticket for every run that had one decided, an active one per parked run."""
    return insert_select(
        Ticket,
        {
            "correlation_id": "md5('ticket' || r.id)::uuid",
            "run_id": "r.id",
            "thread_id": "r.thread_id",
            "snapshot_id": "md5('snapshot' || r.id)",
            "catalog_fingerprint": "md5('catalog')",
            "deadline": "r.created_at + interval '1 day'",
            "kind": "'tool_permission'",
            "call_id": "'call_1'",
            "tool": "'notes.write'",
            "arguments": '\'{"title": "seeded", "body": "seeded"}\'::jsonb',
            "arguments_digest": "md5('args' || r.id)",
            "status": "CASE WHEN r.status = 'awaiting' THEN 'active' ELSE 'answered' END",
            "created_at": "r.created_at",
            "resolved_at": "CASE WHEN r.status = 'awaiting' THEN NULL ELSE r.updated_at END",
            "resolution": '\'{"decision": "allow"}\'::jsonb',
        },
        f"{runs} WHERE r.status = 'awaiting' OR r.i %% {DECIDED_EVERY} = 0",
    )


def seed_bench_history(slug: str, runs: int) -> None:
    """A production database is not empty: give the planner tables of a realistic size
    (20,000 finished conversations of 10 events) before `bench_cluster` measures, once per
    database. Measured on empty tables, prepared statements keep plans made for a handful
    of rows while the benchmark itself grows them."""
    if Thread.objects.count() >= runs:
        return
    config_id = Configuration.objects.get(slug=slug).pk
    seed_history(
        History(runs=runs, active_tickets=0), configuration_ids=[config_id], user_ids=[None]
    )
    vacuum_hot_tables()


def vacuum_hot_tables() -> None:
    """Every measurement starts from tables without dead rows. The queue table churns
    (a row in and out per wake-up); a server without autovacuum (this machine's has it
    off) would otherwise make each measurement slower than the one before."""
    with connection.cursor() as cursor:
        cursor.execute(
            "VACUUM (ANALYZE) django_q_ormq, agentruns_run, agentruns_event, "
            "agentruns_checkpoint, agentruns_toolinvocation, agentruns_gateaudit"
        )
