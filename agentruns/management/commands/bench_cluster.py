"""`manage.py bench_cluster`: the cluster's performance figures, measured on a real cluster
started the way the README configures it (PERF-5, PERF-6).

- PERF-5, approval to execution: a run parks on `notes.write` (needs approval); from
  `run_resume` returning to the approved tool starting (the Note row's creation time; the
  tool creates it first thing), median over `--perf5-samples` resumes, one at a time.
- PERF-6, concurrency: N runs in flight at once (`--sizes`) with a scripted provider that
  answers in `--latency-ms`, `--turns` turns of one read-only tool call each, then a final
  reply (like `bench/peer_langgraph_concurrency.py`). All N are submitted in ONE
  transaction, so their wake-ups appear together; wall time runs from that commit to the
  last run's terminal write. Ideal = (turns + 1) x latency. Also the most runs seen
  `running` at once and the most PostgreSQL connections seen (`pg_stat_activity`).
- `--alternatives` repeats PERF-6 for other shapes of the same machine (more processes with
  fewer threads, one process, one run per process) to show why the default is what it is.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, connections, transaction
from django.db.models import Count, Max
from django.utils import timezone

from agentruns.cluster.process import ClusterProcess, start_cluster, wait_for


@dataclass(frozen=True)
class Shape:
    """One way to spend the machine: q2 worker processes x executor threads, pool size."""

    name: str
    workers: int
    threads: int
    pool_max: int

    def env(self) -> dict[str, str]:
        return {
            "AGENTRUNS_Q_WORKERS": str(self.workers),
            "AGENTRUNS_EXECUTOR_THREADS": str(self.threads),
            "AGENTRUNS_DB_POOL_MAX": str(self.pool_max),
        }

    def describe(self) -> str:
        return f"{self.workers} proc x {self.threads} threads, pool {self.pool_max}"


ALTERNATIVES = (
    Shape("more processes", workers=4, threads=128, pool_max=10),
    Shape("many processes", workers=8, threads=64, pool_max=6),
    Shape("one process", workers=1, threads=512, pool_max=20),
    Shape("one run per process", workers=16, threads=1, pool_max=2),
)


@dataclass
class Sampler:
    """Samples connections and running runs in the background while a batch runs."""

    configuration_id: int
    max_connections: int = 0
    max_connections_db: int = 0
    max_running: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _loop(self) -> None:
        from agentruns.models import Run

        try:
            while not self._stop.wait(0.25):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*), count(*) FILTER (WHERE datname = current_database()) "
                        "FROM pg_stat_activity WHERE backend_type = 'client backend'"
                    )
                    total, here = cursor.fetchone()
                running = Run.objects.filter(
                    configuration_id=self.configuration_id, status=Run.Status.RUNNING
                ).count()
                self.max_connections = max(self.max_connections, total)
                self.max_connections_db = max(self.max_connections_db, here)
                self.max_running = max(self.max_running, running)
        finally:
            connection.close()


class Command(BaseCommand):
    help = "Measure PERF-5 and PERF-6 on a real django-q2 cluster (PostgreSQL)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="50,200,400,500")
        parser.add_argument("--latency-ms", type=int, default=1000)
        parser.add_argument("--turns", type=int, default=3)
        parser.add_argument("--perf5-samples", type=int, default=20)
        parser.add_argument("--skip-perf5", action="store_true")
        parser.add_argument("--skip-perf6", action="store_true")
        parser.add_argument(
            "--alternatives",
            action="store_true",
            help="Also measure PERF-6 for other process/thread shapes.",
        )
        parser.add_argument(
            "--alternative-sizes",
            default="50,500",
            help="Sizes for the alternatives (default 50,500).",
        )
        parser.add_argument("--workers", type=int, default=settings.Q_CLUSTER["workers"])
        parser.add_argument("--threads", type=int, default=settings.AGENTRUNS_EXECUTOR_THREADS)
        parser.add_argument("--pool-max", type=int, default=settings.AGENTRUNS_DB_POOL_MAX)
        parser.add_argument(
            "--external",
            action="store_true",
            help="Use a cluster that is already running instead of starting one.",
        )
        parser.add_argument("--json", dest="json_path", help="Also write the results here.")

    # ---- orchestration ------------------------------------------------------------------

    def handle(self, *args: Any, **opts: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError("bench_cluster needs PostgreSQL (set DATABASE_URL).")
        ensure_database()
        call_command("migrate", interactive=False, verbosity=0)
        self.stamp = int(time.time())
        self.user = bench_user()
        self.provider = bench_provider()
        results: dict[str, Any] = {"perf6": [], "perf5": None}
        shape = Shape("default", opts["workers"], opts["threads"], opts["pool_max"])
        sizes = [int(s) for s in opts["sizes"].split(",") if s.strip()]
        self.stdout.write(
            f"bench_cluster: {os.cpu_count()} cores, cluster {shape.describe()}, lease "
            f"{settings.AGENTRUNS_LEASE_SECONDS:g}s"
        )
        seed_history(self.configuration("seed", latency_ms=0, turns=1))
        with self.cluster(shape, external=opts["external"]):
            if not opts["skip_perf5"]:
                results["perf5"] = self.perf5(opts["perf5_samples"])
            if not opts["skip_perf6"]:
                for n in sizes:
                    results["perf6"].append(self.perf6(shape, n, opts["latency_ms"], opts["turns"]))
        if opts["alternatives"]:
            alt_sizes = [int(s) for s in opts["alternative_sizes"].split(",") if s.strip()]
            for alt in ALTERNATIVES:
                with self.cluster(alt, external=False):
                    for n in alt_sizes:
                        results["perf6"].append(
                            self.perf6(alt, n, opts["latency_ms"], opts["turns"])
                        )
        if opts["json_path"]:
            Path(opts["json_path"]).write_text(json.dumps(results, indent=2, default=str))

    def cluster(self, shape: Shape, *, external: bool) -> _ClusterContext:
        return _ClusterContext(self, shape, external)

    def warm_up(self, shape: Shape) -> None:
        """Every process up, pools open: a few quick runs must complete."""
        slug = self.configuration("warm", latency_ms=0, turns=1, tool="clock.now")
        ids = self.submit(slug, max(4, 2 * shape.workers))
        self.wait_terminal(ids, timeout=120)

    # ---- PERF-5 ---------------------------------------------------------------------------

    def perf5(self, samples: int) -> dict[str, Any] | None:
        from agentruns.bench.workload import allow_as_shown
        from agentruns.models import Note, Run, Ticket
        from agentruns.services.resume import run_resume

        vacuum_hot_tables()

        slug = self.configuration(
            "perf5",
            latency_ms=0,
            turns=1,
            tool="notes.write",
            arguments={"title": "bench", "body": "approved"},
            allowed=["notes"],
        )
        ids = self.submit(slug, samples)
        wait_for(
            lambda: Run.objects.filter(pk__in=ids, status=Run.Status.AWAITING).count() == len(ids),
            timeout=120,
            what="PERF-5 runs to park",
        )
        latencies = []
        for run_id in ids:
            ticket = Ticket.objects.get(run_id=run_id, status="active")
            run_resume(user=self.user, run_id=run_id, command=allow_as_shown(ticket))
            returned = timezone.now()
            notes = Note.objects.filter(run_id=run_id)
            note = wait_for(
                notes.first, timeout=30, what=f"run {run_id}'s approved tool", every=0.005
            )
            assert note is not None
            latencies.append((note.created_at - returned).total_seconds() * 1000)
        self.wait_terminal(ids, timeout=60)
        latencies.sort()
        result = {
            "samples": len(latencies),
            "median_ms": round(statistics.median(latencies), 1),
            "p90_ms": round(latencies[int(0.9 * (len(latencies) - 1))], 1),
            "max_ms": round(latencies[-1], 1),
        }
        self.stdout.write(
            f"PERF-5 approval->execution: median {result['median_ms']} ms, p90 "
            f"{result['p90_ms']} ms, max {result['max_ms']} ms over {len(latencies)} "
            f"resumes (target: median <= 250 ms)"
        )
        return result

    # ---- PERF-6 ---------------------------------------------------------------------------

    def perf6(self, shape: Shape, n: int, latency_ms: int, turns: int) -> dict[str, Any]:
        from agentruns.models import Configuration, Run

        slug = self.configuration(f"perf6-{n}", latency_ms=latency_ms, turns=turns)
        vacuum_hot_tables()
        with transaction.atomic():
            ids = self.submit(slug, n)
        start = timezone.now()
        ideal = (turns + 1) * latency_ms / 1000
        config_id = Configuration.objects.get(slug=slug).pk
        with Sampler(config_id) as sampler:
            self.wait_terminal(ids, timeout=ideal * 10 + 120, configuration_id=config_id)
        end = Run.objects.filter(pk__in=ids).aggregate(end=Max("updated_at"))["end"]
        wall = (end - start).total_seconds()
        statuses = dict(
            Run.objects.filter(pk__in=ids)
            .order_by()
            .values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        completed = Run.objects.filter(pk__in=ids, status=Run.Status.COMPLETED).count()
        result = {
            "shape": shape.name,
            "cluster": shape.describe(),
            "in_flight": n,
            "turns": turns,
            "latency_s": latency_ms / 1000,
            "wall_s": round(wall, 2),
            "ideal_s": ideal,
            "efficiency": round(ideal / wall, 3),
            "max_running": sampler.max_running,
            "max_connections": sampler.max_connections,
            "max_connections_this_db": sampler.max_connections_db,
            "completed": completed,
        }
        if completed != n:
            result["statuses"] = statuses
        self.stdout.write(
            f"PERF-6 [{shape.describe()}] in-flight={n} turns={turns} "
            f"latency={latency_ms / 1000:g}s wall_s={wall:.2f} ideal_s={ideal:.2f} "
            f"efficiency={ideal / wall:.0%} max_running={sampler.max_running} "
            f"max_connections={sampler.max_connections} "
            f"(this db {sampler.max_connections_db}) completed={completed}/{n}"
        )
        return result

    # ---- helpers --------------------------------------------------------------------------

    def configuration(
        self,
        name: str,
        *,
        latency_ms: int,
        turns: int,
        tool: str = "clock.now",
        arguments: dict[str, Any] | None = None,
        allowed: list[str] | None = None,
    ) -> str:
        from agentruns.models import Configuration

        slug = f"bench-cluster-{name}-{self.stamp}"
        call = {"name": tool, "arguments": arguments or {}}
        Configuration.objects.update_or_create(
            slug=slug,
            defaults={
                "name": slug,
                "provider": self.provider,
                "model": "scripted",
                "allowed_tools": allowed or [tool],
                "max_tool_calls": max(10, turns),
                "script": {
                    "turns": [{"tool_calls": [call]}] * turns + [{"text": "done"}],
                    "latency_ms": latency_ms,
                },
            },
        )
        return slug

    def submit(self, slug: str, n: int) -> list[int]:
        from agentruns.services.runs import Submission, run_submit

        submission = Submission(configuration=slug, input="go")
        return [run_submit(user=self.user, submission=submission)[0].pk for _ in range(n)]

    def wait_terminal(
        self, ids: list[int], *, timeout: float, configuration_id: int | None = None
    ) -> None:
        """Poll cheaply (by configuration when the batch has its own) so the benchmark
        itself takes little of the machine it measures."""
        from agentruns.models import Run

        runs = (
            Run.objects.filter(configuration_id=configuration_id)
            if configuration_id
            else Run.objects.filter(pk__in=ids)
        )
        wait_for(
            lambda: not runs.exclude(status__in=Run.TERMINAL).exists(),
            timeout=timeout,
            what=f"{len(ids)} runs to end",
            every=0.1,
        )


class _ClusterContext:
    def __init__(self, command: Command, shape: Shape, external: bool) -> None:
        self.command, self.shape, self.external = command, shape, external
        self.process: ClusterProcess | None = None

    def __enter__(self) -> _ClusterContext:
        if not self.external:
            log = (
                Path(settings.VAR_DIR)
                / f"bench-cluster-{self.shape.workers}x{self.shape.threads}.log"
            )
            log.unlink(missing_ok=True)
            self.process = start_cluster(f"bench-{self.shape.name}", log, self.shape.env())
        try:
            self.command.warm_up(self.shape)
        except Exception:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stop(timeout=60)
            self.process = None
        connections.close_all()


SEED_RUNS = 20_000


def seed_history(slug: str) -> None:
    """A production database is not empty: give the planner tables of a realistic size
    (20,000 finished conversations of 10 events) before measuring, once per database.
    Measured on empty tables, prepared statements keep plans made for a handful of rows
    while the benchmark itself grows them."""
    from agentruns.bench.seed import History
    from agentruns.bench.seed import seed_history as seed
    from agentruns.models import Configuration, Thread

    if Thread.objects.count() >= SEED_RUNS:
        return
    config_id = Configuration.objects.get(slug=slug).pk
    seed(History(runs=SEED_RUNS, active_tickets=0), configuration_ids=[config_id], user_ids=[None])
    vacuum_hot_tables()


def vacuum_hot_tables() -> None:
    """Every measurement starts from tables without dead rows. The queue table churns
    (a row in and out per wake-up); a server without autovacuum (this machine's has it
    off) would otherwise make each measurement slower than the one before."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "VACUUM (ANALYZE) django_q_ormq, agentruns_run, agentruns_event, "
            "agentruns_checkpoint, agentruns_toolinvocation, agentruns_gateaudit"
        )


def ensure_database() -> None:
    """Create the configured database when it does not exist yet (like the peer scripts)."""
    import psycopg
    from psycopg import sql

    params = connection.get_connection_params()
    name = params.pop("dbname")
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("client_encoding", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def bench_user() -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(
        username="bench-cluster", defaults={"is_staff": True, "is_superuser": True}
    )
    return user


def bench_provider() -> Any:
    from agentruns.models import Provider

    provider, _ = Provider.objects.get_or_create(
        slug="bench-cluster-scripted",
        defaults={"name": "Bench (scripted)", "kind": "scripted", "trust_zone": "local"},
    )
    return provider
