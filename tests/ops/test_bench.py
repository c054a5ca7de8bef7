"""PERF-2 (and the parameters behind PERF-1) counted by a test; PERF-9: `manage.py bench`
runs at a tiny size on every schema.

The peers (LangGraph, DBOS) take part only when `.venv-peers` is already there (a
developer's machine after one `make bench`): a clean clone has none, and installing it
(about 20 s here, more on a cold network) would buy CI nothing a schema change could
break. The floor runs through the same child-process protocol everywhere, from the
project's interpreter.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection

from agentruns.bench import harness, loop, runcost, workload
from agentruns.bench.sampling import CpuWindow, postgres_pids
from agentruns.models import ToolInvocation
from agentruns.runtime.actions.tool_calls import completion
from agentruns.store.connection import database_url
from agentruns.tools.registry import ToolOutput
from tests.support.hosts import left_behind, require_host_tools

pytestmark = pytest.mark.django_db(transaction=True)

# Every statement one warm reference run sends (10 turns x 2 calls = 31 durable steps).
REFERENCE_STATEMENTS = 23
# ... and the parameters they carry: each is formatted by Python and parsed by the server
# on every step, so a table's rows go as one JSON parameter and a column that needs no
# value of its own (a row's creation time, stamped by the statement) must not grow one.
REFERENCE_PARAMETERS = 230


def test_the_reference_run_sends_exactly_the_known_number_of_statements_perf2():
    statements = loop.reference_statements(workload.bench_user())
    durable_steps = loop.steps(*loop.REFERENCE)
    shapes = Counter(" ".join(sql.split())[:90] for sql in statements)
    listing = "\n".join(f"{n:3} x {sql}" for sql, n in shapes.most_common())
    assert len(statements) == REFERENCE_STATEMENTS, (
        f"The reference run sent {len(statements)} statements, not {REFERENCE_STATEMENTS} "
        f"({len(statements) / durable_steps:.2f} per durable step; PERF-2 allows 2). "
        "More is a regression: find the new statement below. Fewer is progress: set "
        f"REFERENCE_STATEMENTS in {__file__} to {len(statements)} in the same commit.\n" + listing
    )
    assert len(statements) / durable_steps <= 2


def test_the_reference_runs_statements_carry_the_known_number_of_parameters_perf1():
    statements = loop.reference_statements(workload.bench_user())
    parameters = sum(sql.count("%s") for sql in statements)
    assert parameters == REFERENCE_PARAMETERS, (
        f"The reference run sent {parameters} parameters, not {REFERENCE_PARAMETERS}. More is "
        "a regression; fewer is progress: set REFERENCE_PARAMETERS in the same commit."
    )
    steps = [sql for sql in statements if sql.startswith("WITH fence")]
    assert all("statement_timestamp()" in sql for sql in steps if "INSERT" in sql)
    assert not any("VALUES" in sql for sql in steps), "a step's rows go as JSON records"


def test_a_daily_limit_is_checked_on_the_total_the_steps_return_ops2_perf2():
    """A limited configuration's steps bring the day's total back, so of its checks before
    each turn only the first reads the total itself; an unlimited one's carry no total."""
    limited = loop.reference_statements(workload.bench_user(), daily_limit=10**12)
    assert len(limited) == REFERENCE_STATEMENTS + 1
    assert any("shard <>" in sql for sql in limited)
    unlimited = loop.reference_statements(workload.bench_user())
    assert not any("shard <>" in sql for sql in unlimited)


def test_a_tool_completion_writes_no_indexed_column_so_it_is_a_hot_update_perf1():
    """A completion changes no value an index of the table reads (its columns, expressions
    and predicates), so PostgreSQL updates the row in its heap page alone."""
    written = set(completion(1, ToolOutput("done")).changes())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = %s::regclass",
            [ToolInvocation._meta.db_table],
        )
        definitions = [row[0] for row in cursor.fetchall()]
    assert written == {"status", "result", "completed_at"} and len(definitions) == 4
    for definition in definitions:
        named = set(re.findall(r"[a-z_]+", definition.split(" USING ", 1)[1]))
        assert not written & named, definition


def test_sessions_plan_without_jit_and_prepare_generic_plans_perf1_perf8():
    """JIT compiled a page's count over a million runs for 320 ms of a 330 ms query."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('jit'), current_setting('plan_cache_mode')")
        assert cursor.fetchone() == ("off", "force_generic_plan")


@pytest.fixture
def peer_databases():
    """The peers' databases are named after the test database: drop them with it."""
    yield
    names = [f"{connection.settings_dict['NAME']}_{peer}" for peer in ("langgraph", "dbos")]
    with psycopg.connect(database_url("postgres"), autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_bench_runs_end_to_end_at_a_tiny_size_perf9(tmp_path, peer_databases):
    out = tmp_path / "bench.json"
    peers = harness.peer_python(install=False) is not None
    call_command(
        "bench",
        "--runs=1",
        "--rounds=1",
        "--floor-rounds=20",
        "--lengths=2,3",
        "--length-steps=1",
        "--resume-turns=1,3",
        "--peers=present",
        f"--json={out}",
        f"--plot={tmp_path / 'bench.png'}",
        stdout=(tmp_path / "stdout.txt").open("w"),
    )
    result = json.loads(out.read_text())
    printed = (tmp_path / "stdout.txt").read_text()
    assert {"floor", "agentruns"} <= set(result["figures"])
    assert result["ratios"]["floor"]["median"] > 0
    assert "PERF-1 agentruns / durable commit" in printed
    assert result["ratios"]["floor_no_wal"]["median"] > 0
    assert result["perf2"]["statements"] == REFERENCE_STATEMENTS
    assert result["perf4"]["statements"][0] == result["perf4"]["statements"][1]
    assert [p["turns"] for p in result["lengths"] if p["system"] == "agentruns"] == [2, 3]
    assert result["machine"]["cores"]
    assert not result["peers"]["errors"]
    if peers:
        assert {"langgraph", "dbos"} <= set(result["figures"])
        assert (tmp_path / "bench.png").stat().st_size > 0
    else:
        assert "no plot" in printed


def test_the_plot_goes_where_asked_even_when_the_json_goes_elsewhere_perf9(tmp_path):
    """`--json` and `--plot` move apart: the plot's folder is made like the JSON's (a fresh
    clone has no var/bench/ for a plot left at its default)."""
    drawer = tmp_path / "drawer"  # stands in for the peers' interpreter: draws the plot file
    drawer.write_text('#!/bin/sh\n: > "$4"\n')
    drawer.chmod(0o755)
    result = {"machine": {}}
    plot = tmp_path / "var" / "bench" / "bench.png"
    written = harness.write_result(result, tmp_path / "elsewhere" / "b.json", plot, drawer)
    assert plot.exists()
    assert written.endswith(str(plot))


@pytest.mark.slow
def test_bench_cluster_runs_end_to_end_at_a_tiny_size_perf9(tmp_path, peer_databases):
    out = tmp_path / "bench_cluster.json"
    call_command(
        "bench_cluster",
        "--sizes=3",
        "--batches=2",
        "--latency-ms=20",
        "--turns=1",
        "--perf5-samples=2",
        "--parked=2",
        "--seed-runs=20",
        "--workers=1",
        "--threads=8",
        "--pool-max=3",
        "--run-cost=24",
        "--peers=present",
        f"--json={out}",
        f"--plot={tmp_path / 'bench_cluster.png'}",
        stdout=(tmp_path / "stdout.txt").open("w"),
    )
    result = json.loads(out.read_text())
    printed = (tmp_path / "stdout.txt").read_text()
    assert result["perf5"]["samples"] == 2
    # PERF-6, a run alone, before the cluster started: the figures, and the floor beside them.
    alone = result["run_cost"]
    assert alone["runs"] == 12 and alone["python_ms"] > 0 and alone["postgres_ms"] > 0
    assert alone["statements"] > 0 and alone["budget"]["ms"] > 0 and alone["budget"]["ratio"] > 0
    assert all(row["per_run"] > 0 and row["us_each"] > 0 for row in alone["shapes"])
    assert alone["floor"]["select_1_us"] > 0 and alone["floor"]["insert_commit_us"] > 0
    assert "PERF-6 a run alone (12 one after another" in printed and "in flight at 80 %" in printed
    assert [(row["batch"], row["completed"]) for row in result["perf6"]] == [(0, 3), (1, 3)]
    assert all(row["kb_per_in_flight"] is not None for row in result["perf6"])
    # The verdict rests on the median of a size's batches, printed with their range.
    efficiency = result["perf6_by_size"]["agentruns"]["3"]["efficiency"]
    assert efficiency["values"] == [row["efficiency"] for row in result["perf6"]]
    assert efficiency["min"] <= efficiency["median"] <= efficiency["max"]
    assert f"{efficiency['median']:.0%}" in printed and "over 2 batches" in printed
    assert result["perf7"]["parked"]["runs"] == 2
    assert result["perf7"]["parked"]["db_bytes_per_parked"] > 0
    assert "PERF-6 3 in flight" in printed
    # Each batch says what CPU it took, so a figure can be read against the machine's speed.
    for row in result["perf6"]:
        assert 0 <= row["cpu_busy"] <= 1
        parts = row["cpu_ms_per_run_cluster"] + row["cpu_ms_per_run_postgres"]
        assert row["cpu_ms_per_run"] == pytest.approx(parts, abs=0.01)
    assert "PERF-6 3 in flight, CPU (medians)" in printed and "ms CPU a run" in printed
    assert not result["peers"]["errors"]
    if harness.peer_python(install=False) is not None:
        assert [row["batch"] for row in result["peer_concurrency"]] == [0, 1]
        assert "3" in result["perf6_by_size"]["langgraph_async"]
        assert (tmp_path / "bench_cluster.png").stat().st_size > 0


def test_a_runs_statements_are_grouped_by_shape_per_run_perf6():
    """Shapes are named by their CTEs (the loop's statements) or verb and table (Django's);
    each says how many a run sends, what one costs and what they cost a run."""
    step = "WITH fence AS (SELECT 1 FOR SHARE), ev AS (INSERT INTO e SELECT 1) SELECT 1"
    final = "WITH fence AS (SELECT 1), ev AS (SELECT 1), run AS (UPDATE r SET x = 1) SELECT 1"
    orm = 'SELECT "agentruns_configuration"."id" FROM "agentruns_configuration" WHERE id = %s'
    seen = [(step, 400_000), (step, 500_000), (final, 600_000), (step, 450_000), (orm, 80_000)]
    shapes = runcost.by_shape(seen, runs=2)
    assert shapes == [
        {"shape": "fence+ev", "per_run": 1.5, "us_each": 450, "ms_per_run": 0.675},
        {"shape": "fence+ev+run", "per_run": 0.5, "us_each": 600, "ms_per_run": 0.3},
        {
            "shape": "SELECT agentruns_configuration",
            "per_run": 0.5,
            "us_each": 80,
            "ms_per_run": 0.04,
        },
    ]
    # 2000 in flight at 80 % of a 4 s ideal on 2 cores: 10 s of CPU over 2000 runs.
    assert runcost.budget_ms(cores=2, turns=3, latency_ms=1000) == 5.0


def test_a_run_alone_is_measured_beside_the_floor_in_the_same_sitting_perf6(tmp_path):
    """What `bench_cluster --run-cost` measures, without a cluster: every figure there, the
    statements by shape adding up to the backend's CPU a run."""
    config = workload.configuration("bench-run-cost", 3, 1)
    user = workload.bench_user()
    printed: list[str] = []
    result = runcost.measure(
        lambda n: [workload.submit(config, user) for _ in range(n)],
        8,
        turns=3,
        latency_ms=1000,
        say=printed.append,
    )
    assert (result["warm"], result["runs"]) == (4, 4)
    assert result["python_ms"] > 0 and result["postgres_ms"] > 0
    assert result["postgres_ms_whole_runs"] > 0
    total = sum(row["ms_per_run"] for row in result["shapes"])
    assert total == pytest.approx(result["postgres_ms"], abs=0.01)
    assert sum(row["per_run"] for row in result["shapes"]) == pytest.approx(
        result["statements"], abs=0.05
    )
    assert result["floor"]["select_1_us"] > 0 and result["floor"]["insert_commit_us"] > 0
    assert result["budget"]["ms"] == runcost.budget_ms(os.cpu_count() or 1, 3, 1000)
    assert printed[0].startswith("PERF-6 a run alone (4 one after another, no provider wait)")
    assert "floor in this run: SELECT 1" in printed[0]
    assert len(printed) == 2 + len(result["shapes"]) and "in flight at 80 %" in printed[-1]


@pytest.mark.slow
def test_bench_scaleout_runs_two_simulated_hosts_at_a_tiny_size_perf12_perf9(tmp_path):
    """PERF-12, PERF-9: one host, then two, each a namespace behind PgBouncer with a CPU
    quota; every run completes, scaling is judged against the single host, the CPU of a
    run is split between the clusters, PgBouncer and PostgreSQL, and nothing is left."""
    require_host_tools()
    out = tmp_path / "bench_scaleout.json"
    call_command(
        "bench_scaleout",
        "--hosts=1,2",
        "--runs-per-host=4",
        "--latency-ms=20",
        "--turns=1",
        "--seed-runs=20",
        "--workers=1",
        "--threads=8",
        "--pool-max=2",
        "--server-pool=4",
        "--cpus=0.5",
        "--peers=present",
        f"--json={out}",
        f"--plot={tmp_path / 'bench_scaleout.png'}",
        stdout=(tmp_path / "stdout.txt").open("w"),
    )
    result = json.loads(out.read_text())
    printed = (tmp_path / "stdout.txt").read_text()
    assert [(row["hosts"], row["completed"]) for row in result["rows"]] == [(1, 4), (2, 8)]
    assert result["by_hosts"]["1"]["scaling"] == 1.0
    assert result["by_hosts"]["2"]["scaling"] > 0
    for row in result["rows"]:
        assert row["cpu_ms_per_run_cluster"] > 0 and row["cpu_ms_per_run_postgres_this_db"] > 0
        assert row["cpu_ms_per_run_pgbouncer"] >= 0
    assert result["cgroup"].startswith(("v1 ", "v2 "))
    assert "PERF-12 2 host(s), runs/s" in printed
    assert left_behind() == []
    if harness.peer_python(install=False) is not None:
        assert (tmp_path / "bench_scaleout.png").stat().st_size > 0


def test_bench_scale_seeds_and_probes_every_page_at_a_tiny_size_perf8_perf9(tmp_path):
    out = tmp_path / "bench_scale.json"
    call_command(
        "bench_scale",
        "--runs=300",
        "--active-tickets=3",
        "--samples=2",
        "--peers=present",
        f"--json={out}",
        f"--plot={tmp_path / 'bench_scale.png'}",
        stdout=(tmp_path / "stdout.txt").open("w"),
    )
    result = json.loads(out.read_text())
    printed = (tmp_path / "stdout.txt").read_text()
    probes = {row["probe"]: row for row in result["probes"]}
    assert {"inbox page", "API run events", "audit export, one day, whole download"} <= set(probes)
    assert all(row["statuses"] == [200] for row in probes.values()), probes
    assert probes["API run events"]["bytes"] > 100  # a seeded run's events, not an empty page
    assert probes["inbox page"]["bytes"] > probes["inbox count (every page's badge)"]["bytes"]
    assert "-- API run events" in printed  # its slowest statement's plan
    assert "Execution Time" in printed
    # A second run measures what is there rather than seeding again.
    call_command(
        "bench_scale",
        "--runs=300",
        "--samples=1",
        "--only=inbox count",
        "--peers=skip",
        f"--json={out}",
        "--plot=",
        stdout=(tmp_path / "again.txt").open("w"),
    )
    assert "reusing the 300 seeded runs" in (tmp_path / "again.txt").read_text()


@pytest.mark.slow
def test_bench_drivers_runs_both_drivers_in_pairs_at_a_tiny_size_perf6_perf9(tmp_path):
    out = tmp_path / "bench_drivers.json"
    call_command(
        "bench_drivers",
        "--sizes=6",
        "--pairs=2",
        "--processes=1",
        "--latency-ms=20",
        "--turns=1",
        "--work-ms=0.1",
        f"--json={out}",
        stdout=(tmp_path / "stdout.txt").open("w"),
    )
    result = json.loads(out.read_text())
    printed = (tmp_path / "stdout.txt").read_text()
    assert [(row["driver"], row["pair"]) for row in result["batches"]] == [
        ("threads", 0),
        ("asyncio", 0),
        ("threads", 1),
        ("asyncio", 1),
    ]
    assert all(0 < row["efficiency"] <= 1 for row in result["batches"])
    assert "asyncio - threads, per pair" in printed
    # The proxy's tables go with the run.
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('bench_proxy_event'), to_regclass('bench_proxy_run')")
        assert cursor.fetchone() == (None, None)


def test_a_cpu_window_counts_what_its_processes_and_the_database_server_spent_perf6():
    window = CpuWindow(lambda: [os.getpid()])
    window.start()
    spent = time.process_time()
    while time.process_time() - spent < 0.3:  # this process busy for 0.3 s of CPU
        pass
    with connection.cursor() as cursor:  # and the server busy for a moment
        cursor.execute("SELECT count(*) FROM generate_series(1, 2000000)")
    use = window.stop()
    assert use is not None
    assert 0.25 <= use.cluster_s <= 5
    assert use.postgres_s > 0
    assert 0 < use.busy <= 1
    assert postgres_pids(), "the test database's server runs on this machine"
