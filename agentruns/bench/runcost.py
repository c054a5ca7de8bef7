"""PERF-6, a run alone (`bench_cluster --run-cost N`): what ONE run of PERF-6's shape costs,
in this process's Python and in its PostgreSQL backend statement by statement, beside the
floor measured in the same sitting.

A batch's CPU per run moves with the machine: a batch of 1000 on two cores is bound by
CPU, and the same code took 7.5 ms a run on a fast minute and 15 ms on a slow one. A run
alone barely does: N runs of PERF-6's shape (its scripted provider, answering at once) are
driven one after another in this process, and the backend's CPU is read from
`/proc/<pid>/schedstat` (nanoseconds it ran, whatever else the machine does) around each
statement. The floor (`SELECT 1`, and a one-row INSERT that commits, on one prepared
connection) is read the same way in the same sitting, so a statement's cost reads against
the cheapest ones the server has here and now.

Half the measured runs are watched statement by statement (PostgreSQL's CPU by shape);
the other half, taken in turn with them, are not (this process's CPU a run, which the
watching itself would add to, and the backend's over the whole run as a check).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from django.core.management.base import CommandError, CommandParser
from django.db import connection, transaction

from agentruns.bench.peers.floor import BODY, COLUMNS, TABLE, insert
from agentruns.bench.seed import vacuum_hot_tables
from agentruns.bench.workload import run_to_end
from agentruns.store import statements
from agentruns.store.connection import database_url

WARM = 20  # runs driven first, unmeasured: caches, prepared statements, the backend's own
# PERF-6 as raised for wave 4 (SPEC §14): 2000 in flight at 80 % of ideal.
TARGET_IN_FLIGHT, TARGET_SHARE = 2000, 0.8
FLOOR_ROUNDS_PER_RUN, FLOOR_ROUNDS_MAX, FLOOR_WARM = 5, 3000, 50
# The floor's session: the cluster's (config/settings.py), on a connection of its own.
FLOOR_OPTIONS = "-c jit=off -c plan_cache_mode=force_generic_plan"


def add_option(parser: CommandParser) -> None:
    parser.add_argument(
        "--run-cost",
        type=int,
        default=200,
        help="PERF-6, a run alone: N runs of PERF-6's shape one after another in this "
        "process before the cluster starts (the first 20 warm), their Python and "
        "PostgreSQL CPU by statement beside the floor; 0 skips it (as does --external).",
    )


def shape_of(sql: str) -> str:
    """A statement's shape: the names of its CTEs (`fence+ev+cp+up0+au`), else its verb and
    first table (`SELECT agentruns_configuration`)."""
    names = re.findall(r"(\w+) AS \(", sql)
    if names:
        return "+".join(names)
    table = re.search(r"\b(?:FROM|INTO|UPDATE)\s+\"?(\w+)", sql)
    verb = sql.split(None, 1)[0].upper() if sql.strip() else "?"
    return f"{verb} {table.group(1)}" if table else " ".join(sql.split())[:40]


def by_shape(seen: Iterable[tuple[str, int]], runs: int) -> list[dict[str, Any]]:
    """Statements seen in `runs` runs, as (SQL, backend ns), summed by shape: how many a
    run sends, what each costs and what they cost a run, the costliest a run first."""
    totals: dict[str, list[int]] = {}
    for sql, ns in seen:
        total = totals.setdefault(shape_of(sql), [0, 0])
        total[0] += 1
        total[1] += ns
    rows = [
        {
            "shape": shape,
            "per_run": round(count / runs, 2),
            "us_each": round(ns / count / 1000),
            "ms_per_run": round(ns / runs / 1e6, 3),
        }
        for shape, (count, ns) in totals.items()
    ]
    return sorted(rows, key=lambda row: (-row["ms_per_run"], row["shape"]))


def budget_ms(cores: int, turns: int, latency_ms: int) -> float:
    """The CPU a run may take for TARGET_IN_FLIGHT runs in flight at TARGET_SHARE of the
    ideal on `cores`: the batch's wall time at that share, on every core, over its runs."""
    return cores * (turns + 1) * latency_ms / TARGET_SHARE / TARGET_IN_FLIGHT


def _ran_ns(pid: int) -> int:
    """The nanoseconds a (single-threaded) process has run on a CPU."""
    with open(f"/proc/{pid}/schedstat", "rb") as stat:
        return int(stat.read().split()[0])


def _readable(pid: int) -> bool:
    """Whether `pid` is a PostgreSQL backend whose CPU this machine can read: a remote
    server's (or a container's) backend pid names another process here, or none."""
    try:
        if Path(f"/proc/{pid}/comm").read_text() != "postgres\n":
            return False
        _ran_ns(pid)
    except (OSError, ValueError, IndexError):
        return False
    return True


def _backend_pid() -> int:
    connection.ensure_connection()
    pid: int = connection.connection.pgconn.backend_pid
    return pid


@contextmanager
def each_statement(seen: list[tuple[str, int]]) -> Iterator[None]:
    """Appends (SQL, backend ns) for every statement of this thread's connection while it
    lasts: the loop's prepared ones (`statements.observed`) and Django's (its
    `execute_wrapper`)."""

    def prepared(send: statements.Send, db: Any, sql: str, params: list[Any]) -> Any:
        pid = db.connection.pgconn.backend_pid
        before = _ran_ns(pid)
        rows = send(db, sql, params)
        seen.append((sql, _ran_ns(pid) - before))
        return rows

    def orm(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        pid = context["connection"].connection.pgconn.backend_pid
        before = _ran_ns(pid)
        result = execute(sql, params, many, context)
        seen.append((sql, _ran_ns(pid) - before))
        return result

    with statements.observed(prepared), connection.execute_wrapper(orm):
        yield


def measure(
    submit: Callable[[int], list[int]],
    runs: int,
    *,
    turns: int,
    latency_ms: int,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Submit `runs` runs (`submit`, of PERF-6's shape with no latency), drive them one
    after another after WARM of them, measure the floor, say it all, return the figures."""
    if runs < 4:
        raise CommandError("--run-cost wants at least 4 runs (0 skips it).")
    vacuum_hot_tables()
    with transaction.atomic():
        ids = submit(runs)
    warm = min(WARM, runs // 2)
    for run_id in ids[:warm]:
        run_to_end(run_id)
    pid = _backend_pid()
    measurable = _readable(pid)
    seen: list[tuple[str, int]] = []
    watched = plain = python_ns = whole_ns = wall_ns = 0
    for number, run_id in enumerate(ids[warm:]):
        if measurable and number % 2 == 0:
            with each_statement(seen):
                run_to_end(run_id)
            watched += 1
            continue
        ran = _ran_ns(pid) if measurable else 0
        cpu, started = time.process_time_ns(), time.perf_counter_ns()  # after the read above
        run_to_end(run_id)
        python_ns += time.process_time_ns() - cpu
        wall_ns += time.perf_counter_ns() - started
        whole_ns += _ran_ns(pid) - ran if measurable else 0
        plain += 1
        if measurable and _backend_pid() != pid:  # the run's backend CPU would be another's
            raise RuntimeError("the connection changed during a run")
    result: dict[str, Any] = {
        "runs": watched + plain,
        "warm": warm,
        "turns": turns,
        "wall_ms": round(wall_ns / plain / 1e6, 2),  # commits' waits too: not a CPU figure
        "python_ms": round(python_ns / plain / 1e6, 2),
        "postgres_ms": None,
    }
    if measurable:
        shapes = by_shape(seen, watched)
        result |= {
            "postgres_ms": round(sum(ns for _, ns in seen) / watched / 1e6, 2),
            "postgres_ms_whole_runs": round(whole_ns / plain / 1e6, 2),
            "statements": round(len(seen) / watched, 2),
            "shapes": shapes,
            "floor": floor(min(FLOOR_ROUNDS_MAX, FLOOR_ROUNDS_PER_RUN * runs)),
        }
    cores = os.cpu_count() or 1
    budget = budget_ms(cores, turns, latency_ms)
    total = result["python_ms"] + (result["postgres_ms"] or 0)
    result["budget"] = {
        "in_flight": TARGET_IN_FLIGHT,
        "share": TARGET_SHARE,
        "cores": cores,
        "latency_ms": latency_ms,
        "ms": round(budget, 2),
        "run_ms": round(total, 2),
        "ratio": round(total / budget, 2) if budget else None,
    }
    for line in words(result):
        say(line)
    return result


def floor(rounds: int) -> dict[str, Any] | None:
    """The backend CPU of `SELECT 1` and of a one-row INSERT that commits (into `make
    bench`'s floor table), each `rounds` times, prepared, on one autocommit connection;
    None when that backend's CPU cannot be read here."""
    with psycopg.connect(database_url(), autocommit=True, options=FLOOR_OPTIONS) as conn:
        pid = conn.pgconn.backend_pid
        if not _readable(pid):
            return None
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} {COLUMNS}")
        result: dict[str, Any] = {"rounds": rounds}
        for name, sql, params in (
            ("select_1", "SELECT 1", None),
            ("insert_commit", insert(TABLE), (0, BODY)),
        ):
            for _ in range(FLOOR_WARM):
                conn.execute(sql, params, prepare=True)
            ran, started = _ran_ns(pid), time.perf_counter()
            for _ in range(rounds):
                conn.execute(sql, params, prepare=True)
            result[f"{name}_us"] = round((_ran_ns(pid) - ran) / rounds / 1000, 1)
            result[f"{name}_wall_us"] = round((time.perf_counter() - started) / rounds * 1e6, 1)
        conn.execute(f"TRUNCATE {TABLE}")
    return result


def words(result: dict[str, Any]) -> list[str]:
    """What `measure` says: the run, its statements by shape, the budget."""
    head = f"PERF-6 a run alone ({result['runs']} one after another, no provider wait): "
    budget = result["budget"]
    verdict = (
        f"PERF-6 budget: {budget['in_flight']} in flight at {budget['share'] * 100:.0f} % on "
        f"{budget['cores']} cores wants <= {budget['ms']:.2f} ms a run; a run alone takes "
        f"{budget['run_ms']:.1f} ms ({budget['ratio']:.2f}x the budget)"
    )
    if result["postgres_ms"] is None:
        return [
            f"{head}Python {result['python_ms']:.1f} ms; PostgreSQL's backend CPU is not "
            "measurable here (the server does not run on this machine)",
            verdict + ", Python alone",
        ]
    statements_a_run = f"{result['statements']:g}"
    lines = [
        f"{head}Python {result['python_ms']:.1f} ms, PostgreSQL {result['postgres_ms']:.1f} ms "
        f"in {statements_a_run} statements"
    ]
    if result["floor"]:
        floor = result["floor"]
        commits = result["statements"] * floor["insert_commit_us"] / 1000
        lines[0] += (
            f"; floor in this run: SELECT 1 {floor['select_1_us']:.0f} us, INSERT + COMMIT "
            f"{floor['insert_commit_us']:.0f} us (a run's {statements_a_run} commits at the "
            f"floor: {commits:.1f} ms)"
        )
    lines += [
        f"  {row['per_run']:5.2f} a run {row['us_each']:6.0f} us each "
        f"{row['ms_per_run']:6.3f} ms a run  {row['shape']}"
        for row in result["shapes"]
    ]
    return [*lines, verdict]
