"""Our side of `manage.py bench` (PERF-1..PERF-4), in this process, on PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentruns.bench import workload
from agentruns.models import Checkpoint, Event, GateAudit, Run, Ticket, ToolInvocation
from agentruns.services.resume import run_resume

REFERENCE = (10, 2)  # turns, calls per turn: 31 durable steps (SPEC §14)


def steps(turns: int, calls: int) -> int:
    """Durable steps of one run: every model turn (the final reply too) and every call."""
    return turns + 1 + turns * calls


def reference_configuration(daily_limit: int | None = None) -> Any:
    return workload.configuration("bench-reference", *REFERENCE, daily_limit=daily_limit)


def timed_runs(config: Any, user: Any, runs: int, turns: int, calls: int) -> tuple[float, list]:
    """(ms per durable step, run ids) of `runs` runs of `config`, after a warm-up run."""
    workload.run_to_end(workload.submit(config, user))  # warm caches and connections
    ids = [workload.submit(config, user) for _ in range(runs)]
    started = time.perf_counter()
    for run_id in ids:
        workload.run_to_end(run_id)
    elapsed = time.perf_counter() - started
    return 1000 * elapsed / (runs * steps(turns, calls)), ids


def reference_statements(user: Any, daily_limit: int | None = None) -> list[str]:
    """PERF-2: every statement one reference run sends, warm (its configuration cached)."""
    config = reference_configuration(daily_limit)
    workload.run_to_end(workload.submit(config, user))
    run_id = workload.submit(config, user)
    with CaptureQueriesContext(connection) as queries:
        workload.run_to_end(run_id)
    return [query["sql"] for query in queries.captured_queries]


def stored_bytes(run_ids: list[int]) -> int:
    """Everything stored for these runs: their rows, threads, logs, checkpoints,
    invocations, tickets and gate audit rows."""
    keyed_by_run = (Event, Checkpoint, ToolInvocation, Ticket, GateAudit)
    parts = [
        f"SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {m._meta.db_table} t "
        "WHERE t.run_id = ANY(%s)"
        for m in keyed_by_run
    ]
    parts.append(
        "SELECT coalesce(sum(pg_column_size(r.*) + pg_column_size(t.*)), 0) "
        "FROM agentruns_run r JOIN agentruns_thread t ON t.id = r.thread_id WHERE r.id = ANY(%s)"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + " + ".join(f"({part})" for part in parts), [run_ids] * len(parts)
        )
        return int(cursor.fetchone()[0])


def length_point(user: Any, turns: int, calls: int, runs: int) -> dict[str, Any]:
    """One point of the run-length sweep: time per step and bytes stored per run."""
    config = workload.configuration(f"bench-length-{turns}x{calls}", turns, calls)
    ms, ids = timed_runs(config, user, runs, turns, calls)
    return {"ms_per_step": ms, "bytes_per_run": stored_bytes(ids) / runs}


def resume_statements(user: Any, turns: int) -> int:
    """PERF-4: a run parked after `turns` turns; the statements of its resume."""
    config = workload.configuration(f"bench-resume-{turns}", turns, 1, park=True)
    run_id = workload.submit(config, user)
    if workload.execute(run_id) != Run.Status.AWAITING:
        raise RuntimeError("the resume benchmark's run did not park")
    ticket = Ticket.objects.get(run_id=run_id, status=Ticket.Status.ACTIVE)
    run_resume(user=user, run_id=run_id, command=workload.allow_as_shown(ticket))
    with CaptureQueriesContext(connection) as queries:
        workload.run_to_end(run_id)
    return len(queries.captured_queries)
