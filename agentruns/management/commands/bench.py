"""PERF-1..PERF-4 (SPEC §14): ratios against figures measured in the same run.

Run it against a PostgreSQL database of its own (`make bench`); the peers (LangGraph,
DBOS) run from a separate virtual environment when `make bench-peers` created it.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentruns.bench import workload
from agentruns.models import Run, Ticket
from agentruns.services.resume import run_resume
from agentruns.store import on_postgres

PEERS = Path(os.environ.get("AGENTRUNS_PEER_BENCH", settings.BASE_DIR.parent / "shared" / "bench"))
PEER_PYTHON = settings.BASE_DIR / ".venv-peers" / "bin" / "python"
STEPS = 31  # 11 model turns + 20 tool calls


class Command(BaseCommand):
    help = "Measure loop overhead, statements per step, storage growth and resume reads."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=20)
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--no-peers", action="store_true")
        parser.add_argument(
            "--daily-limit",
            type=int,
            default=None,
            help="Give the reference configuration a (never reached) daily token limit, so "
            "PERF-1/PERF-2 include OPS-2's check before every model turn.",
        )

    def handle(
        self,
        *args: Any,
        runs: int,
        rounds: int,
        no_peers: bool,
        daily_limit: int | None,
        **options: Any,
    ) -> None:
        if not on_postgres():
            raise CommandError("The benchmark measures PostgreSQL: set DATABASE_URL.")
        settings.AGENTRUNS_MAX_TURNS = 10_000  # PERF-3 runs 200 turns
        user = workload.bench_user()
        # Shared, noisy machines: interleave the measurements and compare medians.
        bares: list[float] = []
        loops: list[float] = []
        peers: dict[str, list[float]] = {"peer_langgraph.py": [], "peer_dbos.py": []}
        for _ in range(rounds):
            bares.append(bare_commit_ms())
            loops.append(loop_ms_per_step(user, runs, daily_limit))
            for name, seen in peers.items():
                peer = None if no_peers else run_peer(name, runs)
                if peer is not None:
                    seen.append(peer)
        bare, per_step = statistics.median(bares), statistics.median(loops)
        self.line("bare INSERT+COMMIT round trip (median)", f"{bare:.3f} ms  {spread(bares)}")
        self.line("PERF-1 loop overhead per durable step", f"{per_step:.3f} ms  {spread(loops)}")
        self.line("PERF-1 ratio to bare commit (<= 3)", f"{per_step / bare:.2f}x")
        for name, seen in peers.items():
            if not seen:
                self.line(name, "not measured (`make bench-peers` installs the peers)")
                continue
            peer = statistics.median(seen)
            self.line(f"{name} per step", f"{peer:.3f} ms  {spread(seen)}")
            self.line(f"PERF-1 ratio to {name} (<= 0.5)", f"{per_step / peer:.2f}x")
        statements = statements_per_step(user, daily_limit)
        self.line("PERF-2 statements per durable step (<= 4)", f"{statements:.2f}")
        small, large = storage_per_turn(user, 20), storage_per_turn(user, 200)
        self.line("PERF-3 bytes per turn, 20-turn run", f"{small:.0f}")
        self.line("PERF-3 bytes per turn, 200-turn run", f"{large:.0f}")
        self.line("PERF-3 ratio (<= 1.2)", f"{large / small:.2f}x")
        short, long = resume_statements(user, 5), resume_statements(user, 50)
        self.line("PERF-4 statements to resume after 5 turns", str(short))
        self.line("PERF-4 statements to resume after 50 turns", str(long))

    def line(self, label: str, value: str) -> None:
        self.stdout.write(f"{label:<48} {value}")


def spread(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.3f}" for v in values) + ")"


def database_url() -> str:
    db = connection.settings_dict
    return (
        f"postgresql://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
        f"{db['PORT'] or 5432}/{db['NAME']}"
    )


def bare_commit_ms(rounds: int = 2000) -> float:
    """The floor, as ../shared/bench/bare_commit.py measures it, in this process."""
    with psycopg.connect(database_url()) as conn:
        conn.execute(
            "create temp table floor_events (id bigserial primary key, run uuid, seq int, "
            "body jsonb)"
        )
        conn.commit()
        started = time.perf_counter()
        for i in range(rounds):
            conn.execute(
                "insert into floor_events (run, seq, body) values (gen_random_uuid(), %s, %s)",
                (i, '{"k": 1}'),
            )
            conn.commit()
        return 1000 * (time.perf_counter() - started) / rounds


def loop_ms_per_step(user: Any, runs: int, daily_limit: int | None = None) -> float:
    config = workload.configuration("bench-reference", 10, 2, daily_limit=daily_limit)
    workload.run_to_end(workload.submit(config, user))  # warm caches and connections
    ids = [workload.submit(config, user) for _ in range(runs)]
    started = time.perf_counter()
    for run_id in ids:
        workload.run_to_end(run_id)
    return 1000 * (time.perf_counter() - started) / (runs * STEPS)


def run_peer(script: str, runs: int) -> float | None:
    if not PEER_PYTHON.exists() or not (PEERS / script).exists():
        return None
    env = {**os.environ, "RUNS": str(runs), "PEER_DB": peer_database(script)}
    output = subprocess.run(
        [str(PEER_PYTHON), str(PEERS / script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    ).stdout
    match = re.search(r"ms_per_step=([0-9.]+)", output)
    return float(match.group(1)) if match else None


def peer_database(script: str) -> str:
    base = database_url().rsplit("/", 1)[0]
    return f"{base}/{script.removesuffix('.py')}"


def statements_per_step(user: Any, daily_limit: int | None = None) -> float:
    config = workload.configuration("bench-reference", 10, 2, daily_limit=daily_limit)
    run_id = workload.submit(config, user)
    with CaptureQueriesContext(connection) as queries:
        workload.run_to_end(run_id)
    return len(queries.captured_queries) / STEPS


def storage_per_turn(user: Any, turns: int) -> float:
    config = workload.configuration(f"bench-storage-{turns}", turns, 1)
    run_id = workload.submit(config, user)
    workload.run_to_end(run_id)
    with connection.cursor() as cursor:
        cursor.execute(
            "select coalesce((select sum(pg_column_size(e.*)) from agentruns_event e "
            "where e.run_id = %s), 0) + coalesce((select sum(pg_column_size(c.*)) from "
            "agentruns_checkpoint c where c.run_id = %s), 0) + coalesce((select "
            "sum(pg_column_size(i.*)) from agentruns_toolinvocation i where i.run_id = %s), 0)",
            [run_id, run_id, run_id],
        )
        total = cursor.fetchone()[0]
    return total / turns


def resume_statements(user: Any, turns: int) -> int:
    """PERF-4: a run parked after `turns` turns; count the statements of its resume."""
    config = workload.configuration(f"bench-resume-{turns}", turns, 1, park=True)
    run_id = workload.submit(config, user)
    if workload.execute(run_id) != Run.Status.AWAITING:
        raise CommandError("the resume benchmark's run did not park")
    ticket = Ticket.objects.get(run_id=run_id, status=Ticket.Status.ACTIVE)
    run_resume(user=user, run_id=run_id, command=workload.allow_as_shown(ticket))
    with CaptureQueriesContext(connection) as queries:
        workload.run_to_end(run_id)
    return len(queries.captured_queries)
