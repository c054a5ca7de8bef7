"""`manage.py bench_cluster`: the cluster's performance figures, measured on a real cluster
started the way the README configures it (PERF-5, PERF-6, PERF-7), beside LangGraph's
asyncio peer at the same sizes in the same run.

- PERF-6, a run alone (`--run-cost`, before the cluster starts): one run's Python and
  PostgreSQL CPU, statement by statement, beside the floor (`agentruns/bench/runcost.py`).
- PERF-5, approval to execution: a run parks on `notes.write` (needs approval); from
  `run_resume` returning to the approved tool starting (the Note row's creation time; the
  tool creates it first thing), median over `--perf5-samples` resumes, one at a time.
- PERF-6, concurrency: N runs in flight at once (`--sizes`) with a scripted provider that
  answers in `--latency-ms`, `--turns` turns of one read-only tool call each, then a final
  reply (the shape of `agentruns/bench/peers/langgraph_concurrency.py`, which runs right
  after ours, `--batches` times in turn at each size; the verdict is on the median). All N
  are submitted in ONE transaction, so their wake-ups appear together; wall time runs
  from that commit to the last run's terminal write.
  Ideal = (turns + 1) x latency. Also the most runs seen `running` at once, the most
  PostgreSQL connections seen (`pg_stat_activity`, this database and the whole server),
  and the CPU the batch took (`/proc`): how busy the cores were, and per run what the
  cluster and the PostgreSQL server (when it runs on this machine) spent.
- PERF-7, memory: the cluster's proportional set size (every process of its group): its
  peak during a batch less the warm idle cluster's, per run in flight at once; and what
  `--parked` runs parked on a ticket add, per parked run (with the bytes each keeps in
  PostgreSQL).
- `--alternatives` repeats PERF-6 for other shapes of the same machine (more processes with
  fewer threads, one process, one run per process) to show why the default is what it is.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, connections, transaction
from django.db.models import Count, Max
from django.utils import timezone

from agentruns.bench import harness, runcost
from agentruns.bench.sampling import Sampler, cpu_figures, cpu_words, pss_kb
from agentruns.bench.seed import seed_bench_history, vacuum_hot_tables
from agentruns.cluster.process import ClusterProcess, start_cluster, wait_for
from agentruns.store import on_postgres
from agentruns.store.connection import database_url

PERF5_TARGET_MS = 50
PERF6_TARGET, PERF6_CONNECTIONS = 0.8, 50
PERF7_PARKED_KB, PERF7_IN_FLIGHT_KB = 50, 300
# What PERF-6 summarises over a size's batches.
PERF6_FIGURES = (
    "efficiency",
    "wall_s",
    "max_connections_this_db",
    "kb_per_in_flight",
    "cpu_busy",
    "cpu_ms_per_run",
    "cpu_ms_per_run_cluster",
    "cpu_ms_per_run_postgres",
)
SEED_RUNS = 20_000


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


class Command(BaseCommand):
    help = "Measure PERF-5..PERF-7 on a real django-q2 cluster (PostgreSQL), beside LangGraph."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="50,200,500,1000")
        parser.add_argument("--latency-ms", type=int, default=1000)
        parser.add_argument("--turns", type=int, default=3)
        parser.add_argument(
            "--batches",
            type=int,
            default=3,
            help="PERF-6: batches at each size, ours and the peer's taken in turn; the "
            "verdict is on their median.",
        )
        parser.add_argument("--perf5-samples", type=int, default=20)
        parser.add_argument("--parked", type=int, default=1000, help="Runs parked for PERF-7.")
        parser.add_argument(
            "--seed-runs",
            type=int,
            default=SEED_RUNS,
            help="Finished runs the database holds before measuring (seeded once).",
        )
        parser.add_argument("--skip-perf5", action="store_true")
        parser.add_argument("--skip-perf6", action="store_true")
        parser.add_argument("--skip-perf7", action="store_true")
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
        parser.add_argument("--peer-pool", type=int, default=20, help="LangGraph's pool size.")
        runcost.add_option(parser)
        harness.add_options(parser, "bench_cluster", peers="install")

    # ---- orchestration ------------------------------------------------------------------

    def handle(self, *args: Any, **opts: Any) -> None:
        if not on_postgres():
            raise CommandError("bench_cluster needs PostgreSQL (set DATABASE_URL).")
        ensure_database()
        call_command("migrate", interactive=False, verbosity=0)
        self.opts, self.stamp = opts, int(time.time())
        self.user, self.provider = bench_user(), bench_provider()
        self.python = harness.peers_chosen(opts["peers"], self.say)
        shape = Shape("default", opts["workers"], opts["threads"], opts["pool_max"])
        result: dict[str, Any] = {
            "benchmark": "bench_cluster",
            "machine": harness.machine(),
            "cluster": shape.describe(),
            "lease_seconds": settings.AGENTRUNS_LEASE_SECONDS,
            "peers": {"versions": harness.peer_versions(self.python), "errors": []},
            "run_cost": None,
            "perf5": None,
            "batches": opts["batches"],
            "perf6": [],
            "peer_concurrency": [],
            "perf6_by_size": {},
            "perf7": None,
        }
        self.result = result
        self.say(
            f"bench_cluster: {os.cpu_count()} cores, cluster {shape.describe()}, lease "
            f"{settings.AGENTRUNS_LEASE_SECONDS:g}s, load {result['machine']['load_before']}; "
            f"LangGraph peer: {'yes' if self.python else 'not installed'}"
        )
        seed_bench_history(self.configuration("seed", latency_ms=0, turns=1), opts["seed_runs"])
        try:
            self.measure(shape, result)
        except Exception as failed:  # what was measured before it is still worth keeping
            result["failed"] = repr(failed)
            raise
        finally:
            self.summarise(result)
            self.report(result)
            plot = Path(opts["plot"]) if opts["plot"] else None
            self.say(harness.write_result(result, Path(opts["json"]), plot, self.python))

    def measure(self, shape: Shape, result: dict[str, Any]) -> None:
        opts = self.opts
        if opts["run_cost"] and not opts["external"]:  # before a cluster would take the runs
            slug = self.configuration("run-cost", latency_ms=0, turns=opts["turns"])
            result["run_cost"] = runcost.measure(
                lambda n: self.submit(slug, n),
                opts["run_cost"],
                turns=opts["turns"],
                latency_ms=opts["latency_ms"],
                say=self.say,
            )
        with self.cluster(shape, external=opts["external"]) as cluster:
            if not opts["skip_perf5"]:
                result["perf5"] = self.perf5(opts["perf5_samples"])
            if not opts["skip_perf6"]:
                # Smallest first: each batch's peak memory, less the idle cluster's, is then
                # what that many runs in flight cost (a heap, once grown, stays grown).
                for n in sorted(harness.csv_ints(opts["sizes"])):
                    for batch in range(max(1, opts["batches"])):
                        result["perf6"].append({**self.perf6(shape, n, cluster), "batch": batch})
                        result["peer_concurrency"].extend(
                            {**row, "batch": batch} for row in self.peer_concurrency(n)
                        )
            if not opts["skip_perf7"] and opts["parked"]:
                result["perf7"] = {"parked": self.parked(cluster, opts["parked"])}
        if opts["alternatives"]:
            for alt in ALTERNATIVES:
                with self.cluster(alt, external=False) as cluster:
                    for n in harness.csv_ints(opts["alternative_sizes"]):
                        result["perf6"].append(self.perf6(alt, n, cluster))

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def cluster(self, shape: Shape, *, external: bool) -> _ClusterContext:
        return _ClusterContext(self, shape, external)

    def warm_up(self, shape: Shape) -> None:
        """Every process up, pools open: a few quick runs must complete."""
        slug = self.configuration("warm", latency_ms=0, turns=1, tool="clock.now")
        ids = self.submit(slug, max(4, 2 * shape.workers))
        self.wait_terminal(ids, timeout=120)

    # ---- PERF-5 ---------------------------------------------------------------------------

    def park(self, name: str, n: int) -> list[int]:
        """n runs parked on a `notes.write` ticket."""
        from agentruns.models import Run

        slug = self.configuration(
            name,
            latency_ms=0,
            turns=1,
            tool="notes.write",
            arguments={"title": "bench", "body": "approved"},
            allowed=["notes"],
        )
        with transaction.atomic():
            ids = self.submit(slug, n)
        wait_for(
            lambda: Run.objects.filter(pk__in=ids, status=Run.Status.AWAITING).count() == len(ids),
            timeout=120 + n * 0.1,
            what=f"{name}: {n} runs to park",
            every=0.1,
        )
        return ids

    def perf5(self, samples: int) -> dict[str, Any] | None:
        from agentruns.bench.workload import allow_as_shown
        from agentruns.models import Note, Ticket
        from agentruns.services.resume import run_resume

        vacuum_hot_tables()
        ids = self.park("perf5", samples)
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
            "target_ms": PERF5_TARGET_MS,
        }
        self.say(
            f"PERF-5 approval->execution: median {result['median_ms']} ms, p90 "
            f"{result['p90_ms']} ms, max {result['max_ms']} ms over {len(latencies)} resumes"
        )
        return result

    # ---- PERF-6 and PERF-7 ----------------------------------------------------------------

    def perf6(self, shape: Shape, n: int, cluster: _ClusterContext) -> dict[str, Any]:
        from agentruns.models import Configuration, Run

        latency_ms, turns = self.opts["latency_ms"], self.opts["turns"]
        slug = self.configuration(f"perf6-{n}", latency_ms=latency_ms, turns=turns)
        vacuum_hot_tables()
        before = cluster.idle_kb  # the heap a batch grows stays grown: count it to the batch
        with transaction.atomic():
            ids = self.submit(slug, n)
        start = timezone.now()
        ideal = (turns + 1) * latency_ms / 1000
        config_id = Configuration.objects.get(slug=slug).pk
        with Sampler(config_id, pids=cluster.pids) as sampler:
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
        completed = statuses.get(Run.Status.COMPLETED, 0)
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
            "pss_idle_kb": before,
            "pss_peak_kb": sampler.max_pss_kb,
            "kb_per_in_flight": (
                round((sampler.max_pss_kb - before) / max(1, sampler.max_running), 1)
                if before
                else None
            ),
        }
        if completed != n:
            result["statuses"] = statuses
        result.update(cpu_figures(sampler.cpu, n))
        self.say(
            f"PERF-6 [{shape.describe()}] in-flight={n} wall_s={wall:.2f} ideal_s={ideal:.2f} "
            f"efficiency={ideal / wall:.0%} max_running={sampler.max_running} connections="
            f"{sampler.max_connections_db} (server {sampler.max_connections}) "
            f"kb_per_in_flight={result['kb_per_in_flight']} completed={completed}/{n}"
            + (f" {cpu_words(result)}" if sampler.cpu else "")
        )
        return result

    def peer_concurrency(self, n: int) -> list[dict[str, Any]]:
        """LangGraph's asyncio process at the same size, right after ours."""
        if self.python is None:
            return []
        env = {
            "PEER_DB": harness.peer_database("langgraph"),
            "SIZES": str(n),
            "TURNS": str(self.opts["turns"]),
            "LATENCY": str(self.opts["latency_ms"] / 1000),
            "POOL": str(self.opts["peer_pool"]),
        }
        try:
            rows = harness.run_peer(self.python, "langgraph_concurrency", env)
        except harness.PeerFailed as failed:
            self.result["peers"]["errors"].append(str(failed))
            self.say(f"  {failed}")
            return []
        for row in rows:
            self.say(
                f"PERF-6 [LangGraph asyncio, pool {row['connections']}] in-flight={n} "
                f"wall_s={row['wall_s']:.2f} efficiency={row['efficiency']:.0%} "
                f"kb_per_in_flight={row['kb_per_in_flight']}"
            )
        return rows

    def parked(self, cluster: _ClusterContext, n: int) -> dict[str, Any]:
        """PERF-7: what n parked runs hold in the cluster's memory, and on PostgreSQL's disk.
        Two batches park and are cancelled unmeasured first: the workers' heaps grow to
        their peak concurrency once (measured on a fresh cluster: +15 MB, then +47 MB for
        1000 runs, then nothing), which is no cost of parking."""
        from agentruns.bench.loop import stored_bytes
        from agentruns.services.runs import run_cancel

        for warm in range(2):
            for run_id in self.park(f"parked-warm{warm}", n):
                run_cancel(user=self.user, run_id=run_id)
        vacuum_hot_tables()
        before = pss_kb(cluster.pids())
        ids = self.park("parked", n)
        after = pss_kb(cluster.pids())
        result = {
            "runs": n,
            "pss_before_kb": before,
            "pss_after_kb": after,
            "kb_per_parked": round((after - before) / n, 2) if before else None,
            "db_bytes_per_parked": round(stored_bytes(ids) / n),
        }
        for run_id in ids:  # leave no tickets behind
            run_cancel(user=self.user, run_id=run_id)
        self.say(
            f"PERF-7 {n} parked runs: cluster memory {before} -> {after} KB "
            f"({result['kb_per_parked']} KB per parked run), "
            f"{result['db_bytes_per_parked']} B each in PostgreSQL"
        )
        return result

    # ---- the report -----------------------------------------------------------------------

    def summarise(self, result: dict[str, Any]) -> None:
        """PERF-6 per size over its batches: ours at the default shape, and the peer's."""
        ours = [row for row in result["perf6"] if row["shape"] == "default"]
        result["perf6_by_size"] = {
            "agentruns": harness.by_size(ours, PERF6_FIGURES),
            "langgraph_async": harness.by_size(result["peer_concurrency"], PERF6_FIGURES),
        }

    def report(self, result: dict[str, Any]) -> None:
        perf5 = result["perf5"]
        if perf5:
            ok = perf5["median_ms"] <= PERF5_TARGET_MS
            self.say(
                f"{'PERF-5 approval to execution, median':<44} {perf5['median_ms']:>7.1f} ms"
                f"  target <= {PERF5_TARGET_MS} ms  {_ok(ok)}"
            )
        ours = result["perf6_by_size"].get("agentruns", {})
        peers = result["perf6_by_size"].get("langgraph_async", {})
        for n, figures in ours.items():
            efficiency = figures["efficiency"]
            versus = f"   LangGraph {peers[n]['efficiency']['median']:.0%}" if n in peers else ""
            self.say(
                f"{'PERF-6 ' + str(n) + ' in flight, % of ideal':<44} "
                f"{efficiency['median']:>7.0%}  (range {efficiency['min']:.0%} - "
                f"{efficiency['max']:.0%} over {len(efficiency['values'])} batches)   "
                f"{figures['max_connections_this_db']['max']} connections{versus}"
            )
        if ours:
            self.report_largest(ours, peers)
        parked = (result["perf7"] or {}).get("parked")
        if parked and parked["kb_per_parked"] is not None:
            ok = parked["kb_per_parked"] <= PERF7_PARKED_KB
            self.say(
                f"{'PERF-7 memory per parked run':<44} {parked['kb_per_parked']:>7.1f} KB"
                f"  target <= {PERF7_PARKED_KB} KB  {_ok(ok)}"
            )

    def report_largest(self, ours: dict[int, dict], peers: dict[int, dict]) -> None:
        """The targets, judged at the largest size on its batches' median."""
        n = max(ours)
        figures = ours[n]
        ok = (
            n >= 1000
            and figures["efficiency"]["median"] >= PERF6_TARGET
            and figures["max_connections_this_db"]["max"] <= PERF6_CONNECTIONS
        )
        self.say(f"{'PERF-6 target: 1000 at >= 80 %, <= 50 connections':<44} {_ok(ok)}")
        if "cpu_busy" in figures:
            medians = {key: figures[key]["median"] for key in PERF6_FIGURES if key in figures}
            self.say(f"{f'PERF-6 {n} in flight, CPU (medians)':<44} {cpu_words(medians)}")
        if "kb_per_in_flight" in figures:
            kb = figures["kb_per_in_flight"]["median"]
            peer = peers.get(n, {}).get("kb_per_in_flight")
            versus = f"   LangGraph {peer['median']:.0f} KB" if peer else ""
            self.say(
                f"{'PERF-7 memory per in-flight run':<44} {kb:>7.0f} KB  target <= "
                f"{PERF7_IN_FLIGHT_KB} KB  {_ok(kb <= PERF7_IN_FLIGHT_KB)}{versus}"
            )

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


def _ok(passed: bool) -> str:
    return "ok" if passed else "MISSED"


class _ClusterContext:
    def __init__(self, command: Command, shape: Shape, external: bool) -> None:
        self.command, self.shape, self.external = command, shape, external
        self.process: ClusterProcess | None = None
        self.idle_kb = 0

    def __enter__(self) -> _ClusterContext:
        if not self.external:
            log = (
                Path(settings.VAR_DIR)
                / f"bench-cluster-{self.shape.workers}x{self.shape.threads}.log"
            )
            log.unlink(missing_ok=True)
            env = {
                **self.shape.env(),
                "DATABASE_URL": database_url(),  # the one this command measures
                "SECRET_KEY": settings.SECRET_KEY,
            }
            self.process = start_cluster(f"bench-{self.shape.name}", log, env)
        try:
            self.command.warm_up(self.shape)
        except Exception:
            self.__exit__()
            raise
        self.idle_kb = pss_kb(self.pids())  # PERF-7's baseline: up, warm, idle
        return self

    def pids(self) -> list[int]:
        """The cluster's processes (none known for an external one)."""
        return self.process.pids() if self.process is not None else []

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stop(timeout=60)
            self.process = None
        connections.close_all()


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
