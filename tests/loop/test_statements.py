"""The loop's statements sent straight through libpq (store/statements.py, PERF-1): the
same values in and out as through a cursor, the same errors, prepared once per session."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import orjson
import pytest
from django.db import DataError, IntegrityError, ProgrammingError, connection, transaction

from agentruns.bench import workload
from agentruns.models import Run
from agentruns.store import statements
from agentruns.store.statements import prepared, prepared_rows
from agentruns.store.steps import _invocation_updates

pytestmark = pytest.mark.django_db


def _prepared_in_session() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'agentruns_%%'")
        return cursor.fetchone()[0]


def test_values_of_every_formatted_type_come_back_as_they_went():
    moment = datetime(2026, 12, 3, 7, 30, 1, 123456, tzinfo=UTC)
    key = uuid.uuid4()
    row = prepared(
        "SELECT %s::bigint, %s::boolean, %s::boolean, %s::timestamptz = %s, %s::date, "
        "%s::text, %s::text IS NULL, %s::float8, %s::numeric, %s::uuid = %s, "
        "json_build_array(%s::text, 1), '{\"a\": [1, 2]}'::jsonb, 'x %%'",
        [
            2**40,
            True,
            False,
            moment,
            moment,
            date(2026, 12, 3),
            'héllo "quoted" 雪',
            None,
            1.5,
            Decimal("2.25"),
            key,
            str(key),
            Run.Status.RUNNING,
        ],
    )
    assert row == (
        2**40,
        True,
        False,
        True,
        "2026-12-03",
        'héllo "quoted" 雪',
        True,
        "1.5",
        Decimal("2.25"),
        True,
        ["running", 1],
        {"a": [1, 2]},
        "x %",
    )


@pytest.mark.django_db(transaction=True)  # a connection closed outside any test transaction
def test_a_shape_is_prepared_once_per_session_and_again_on_a_new_connection():
    sql = "SELECT %s::bigint + 1"
    assert prepared(sql, [1]) == (2,)
    before = _prepared_in_session()
    assert prepared(sql, [41]) == (42,)
    assert _prepared_in_session() == before  # the second run reused the statement

    connection.close()
    assert prepared(sql, [1]) == (2,)  # a new session prepares it afresh


def test_perf6_a_prepared_statement_is_planned_once_never_for_its_parameters():
    """PostgreSQL would plan each new session's step statements five times for their
    parameters (~2 ms each) before settling on the plan it uses anyway."""
    sql = "SELECT id FROM agentruns_run WHERE id = %s AND epoch = %s"
    for run_id in range(1, 8):
        prepared_rows(sql, [run_id, 0])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'SELECT id FROM agentruns_run WHERE id = $1%%'"
        )
        assert cursor.fetchall() == [(7, 0)]


def test_a_nul_byte_in_a_text_parameter_is_refused_not_truncated():
    with pytest.raises(DataError):
        prepared("SELECT %s::text", ["before\x00after"])


def test_a_server_error_is_djangos_typed_error():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE once (k text PRIMARY KEY)")
    prepared_rows("INSERT INTO once VALUES (%s)", ["k"])
    with pytest.raises(IntegrityError), transaction.atomic():
        prepared_rows("INSERT INTO once VALUES (%s)", ["k"])
    assert prepared("SELECT count(*) FROM once", []) == (1,)


def test_a_value_it_cannot_format_goes_through_the_cursor():
    assert prepared("SELECT %s::bigint[]", [[1, 2]]) == ([1, 2],)


def test_an_observer_sees_every_statement_and_without_one_the_call_is_as_it_was_perf6():
    """`bench_cluster --run-cost` measures each statement through `observed`; with no
    observer, `prepared_rows` calls `_execute` itself, no test or wrapper between."""
    seen = []

    def observer(send, db, sql, params):
        rows = send(db, sql, params)
        seen.append((sql, rows))
        return rows

    with statements.observed(observer):
        assert prepared("SELECT %s::bigint", [7]) == (7,)
        assert prepared("SELECT %s::bigint[]", [[1, 2]]) == ([1, 2],)  # through the cursor
    assert seen == [("SELECT %s::bigint", [(7,)]), ("SELECT %s::bigint[]", [([1, 2],)])]
    assert statements._send is statements._execute
    assert prepared("SELECT %s::bigint", [8]) == (8,) and len(seen) == 2


@pytest.mark.django_db(transaction=True)  # outside a transaction, as the loop's steps run
def test_statements_a_session_lost_are_prepared_again():
    """psycopg sends DEALLOCATE ALL after a rollback once it holds prepared statements of
    its own; a pool may DISCARD ALL. The next step prepares afresh instead of failing."""
    sql = "SELECT %s::bigint * 2"
    assert prepared(sql, [2]) == (4,)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    assert prepared(sql, [3]) == (6,)


def test_inside_a_transaction_a_lost_statement_fails_once_then_is_prepared_again():
    sql = "SELECT %s::bigint * 3"
    assert prepared(sql, [1]) == (3,)
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    with pytest.raises(ProgrammingError), transaction.atomic():
        prepared(sql, [1])
    assert prepared(sql, [2]) == (6,)


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_nothing_outlives_the_statement(monkeypatch):
    """AGENTRUNS_PREPARE=0: psycopg's prepare_threshold is None, and so is ours."""
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    before = _prepared_in_session()
    assert prepared("SELECT %s::bigint + 5", [1]) == (6,)
    assert _prepared_in_session() == before


def test_a_steps_invocation_changes_go_as_rows_one_update_per_set_of_columns_perf1():
    """A batch's completions are the rows of one UPDATE; an invocation changed twice in one
    step (held steps merged) is one row with its later values, since two changes of one
    row in one statement would leave only one of them."""
    sent = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)
    done = datetime(2026, 12, 6, 13, 1, tzinfo=UTC)
    params: list = []
    parts = _invocation_updates(
        [
            (7, {"status": "executing", "effect_sent_at": sent}),
            (8, {"status": "completed", "result": {"ok": True}, "completed_at": done}),
            (9, {"status": "completed", "result": {"ok": False}, "completed_at": done}),
            (7, {"status": "completed", "completed_at": done}),
        ],
        params,
    )
    assert [part.split(" AS ")[0] for part in parts] == ["up0", "up1"]
    first, second = (orjson.loads(bytes(p)) for p in params)
    assert first == [
        {
            "id": 7,
            "status": "completed",
            "effect_sent_at": sent.isoformat(),
            "completed_at": done.isoformat(),
        }
    ]
    assert [row["id"] for row in second] == [8, 9]
    assert second[1]["result"] == {"ok": False}


def test_a_steps_invocation_changes_find_their_rows_by_key_in_a_table_of_thousands_perf1():
    """Told nothing of the JSON's rows, the planner guessed 100 of them and read the whole
    invocation table into a hash at every step while it held under ~10,000 rows (0.6 ms
    at 3,000 against 0.06 by key)."""
    run_id = workload.submit(workload.configuration("plan-probe", 1, 1), workload.bench_user())
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agentruns_toolinvocation (run_id, turn_index, call_id, tool, "
            "tool_version, arguments, arguments_digest, idempotency_key, status, created_at) "
            "SELECT %s, n, 'c' || n, 'bench.noop', '1', '{}', '', 'k' || n, 'executing', now() "
            "FROM generate_series(1, 3000) AS n",
            [run_id],
        )
        cursor.execute("ANALYZE agentruns_toolinvocation")
    params: list = []
    (update,) = _invocation_updates([(1, {"status": "completed"})], params)
    rows = prepared_rows(f"EXPLAIN WITH fence AS (SELECT 1), {update} SELECT 1", params)
    plan = "\n".join(row[0] for row in rows)
    assert "Index Scan using agentruns_toolinvocation_pkey" in plan, plan
    assert "Seq Scan on agentruns_toolinvocation" not in plan, plan
