"""`manage.py bench_scaleout`: PERF-12, the cluster on 1, 2, 3 and 4 machines over one
PostgreSQL, simulated on this one (agentruns/bench/hosts.py).

Each host is a network namespace with a veth to a PgBouncer in transaction mode (the only
way to the database, `AGENTRUNS_PREPARE=0`, no LISTEN), its cluster held to `--cpus` cores
by a cgroup: a real cluster as the README configures it, smaller. At each host count, one
batch of `--runs-per-host` runs per host (the shape of PERF-6: `--turns` tool turns of a
`--latency-ms` provider, then a reply), submitted in one transaction; wall time from that
commit to the last run's terminal write.

Reported per host count: runs/s, the scaling efficiency (runs/s against the single host's
times the count; PERF-12 asks >= 80 % until PostgreSQL saturates), the CPU a run took in
the clusters, PgBouncer and PostgreSQL, and how many cores PostgreSQL kept busy (where it
saturates: at two cores, what the hosts leave it). The quota is what makes a host a
machine of its own size: without it every host shares the same two cores and adding one
adds nothing.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from django.db import connection, transaction
from django.db.models import Count, Max
from django.utils import timezone

from agentruns.bench import harness
from agentruns.bench.hosts import Host, SimulatedHosts, cgroup_version, host_env
from agentruns.bench.sampling import CpuWindow, Sampler, cpu_figures, cpu_words
from agentruns.bench.seed import vacuum_hot_tables
from agentruns.cluster.process import ClusterProcess, start_cluster
from agentruns.management.commands import bench_cluster
from agentruns.store import on_postgres
from agentruns.store.connection import database_url

PERF12_TARGET = 0.8
# Where PostgreSQL counts as saturated: most of a core's worth of the machine the hosts'
# quotas leave it.
SATURATED_SHARE = 0.9


class Command(bench_cluster.Command):
    help = "Measure PERF-12: the cluster on 1..4 simulated hosts through PgBouncer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hosts", default="1,2,3,4", help="Host counts, e.g. 1,2,3,4.")
        parser.add_argument("--runs-per-host", type=int, default=300)
        parser.add_argument("--latency-ms", type=int, default=1000)
        parser.add_argument("--turns", type=int, default=3)
        parser.add_argument("--batches", type=int, default=1)
        parser.add_argument(
            "--cpus",
            type=float,
            default=0.25,
            help="Each host's CPU quota, in cores (0: none; every host shares the machine).",
        )
        parser.add_argument("--workers", type=int, default=settings.Q_CLUSTER["workers"])
        parser.add_argument("--threads", type=int, default=settings.AGENTRUNS_EXECUTOR_THREADS)
        parser.add_argument("--pool-max", type=int, default=settings.AGENTRUNS_DB_POOL_MAX)
        parser.add_argument(
            "--server-pool",
            type=int,
            default=30,
            help="PgBouncer's server connections to PostgreSQL, shared by every host.",
        )
        parser.add_argument("--seed-runs", type=int, default=bench_cluster.SEED_RUNS)
        # No peer runs here; their environment brings the plot's matplotlib, as for `make bench`.
        harness.add_options(parser, "bench_scaleout", peers="install")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not on_postgres():
            raise CommandError("bench_scaleout needs PostgreSQL (set DATABASE_URL).")
        bench_cluster.ensure_database()
        call_command("migrate", interactive=False, verbosity=0)
        with connection.cursor() as cursor:
            # What the clusters' connection options would set, which PgBouncer cannot
            # pass on (agentruns/bench/hosts.py): the database's own default instead.
            cursor.execute(f'ALTER DATABASE "{connection.settings_dict["NAME"]}" SET jit = off')
        self.opts, self.stamp = opts, int(time.time())
        self.user, self.provider = bench_cluster.bench_user(), bench_cluster.bench_provider()
        self.python = harness.peers_chosen(opts["peers"], self.say)
        self.shape = bench_cluster.Shape(
            "default", opts["workers"], opts["threads"], opts["pool_max"]
        )
        counts = sorted(harness.csv_ints(opts["hosts"]))
        result: dict[str, Any] = {
            "benchmark": "bench_scaleout",
            "machine": harness.machine(),
            "host_cluster": self.shape.describe(),
            "host_cpus": opts["cpus"],
            "cgroup": f"v{cgroup_version()} "
            + ("cpu.max" if cgroup_version() == 2 else "cpu.cfs_quota_us"),
            "pgbouncer": {"pool_mode": "transaction", "server_pool": opts["server_pool"]},
            "runs_per_host": opts["runs_per_host"],
            "turns": opts["turns"],
            "latency_s": opts["latency_ms"] / 1000,
            "rows": [],
            "by_hosts": {},
        }
        self.say(
            f"bench_scaleout: hosts {counts}, each {self.shape.describe()} held to "
            f"{opts['cpus']:g} cores ({result['cgroup']}), {opts['runs_per_host']} runs a "
            f"host, PgBouncer transaction mode, {opts['server_pool']} server connections"
        )
        seed_slug = self.configuration("seed", latency_ms=0, turns=1)
        bench_cluster.seed_bench_history(seed_slug, opts["seed_runs"])
        try:
            with SimulatedHosts(
                database_url(),
                max(counts),
                cpus=opts["cpus"] or None,
                server_pool=opts["server_pool"],
            ) as hosts:
                for count in counts:
                    for batch in range(max(1, opts["batches"])):
                        row = self.hosts_batch(hosts, count)
                        result["rows"].append({**row, "batch": batch})
        except Exception as failed:
            result["failed"] = repr(failed)
            raise
        finally:
            summarise(result)
            self.report(result)
            plot = Path(opts["plot"]) if opts["plot"] else None
            self.say(harness.write_result(result, Path(opts["json"]), plot, self.python))

    def hosts_batch(self, hosts: SimulatedHosts, count: int) -> dict[str, Any]:
        with ExitStack() as stack:
            # Stopped by the stack, the last started first, whatever happens.
            clusters = [self.start_host(host, stack) for host in hosts.hosts[:count]]
            self.warm_up(bench_cluster.Shape("warm", self.shape.workers * count, 1, 1))
            return self.batch(hosts, clusters)
        raise AssertionError("unreachable: ExitStack swallows nothing here")

    def start_host(self, host: Host, stack: ExitStack) -> ClusterProcess:
        log = Path(settings.VAR_DIR) / f"bench-scaleout-{host.name}.log"
        log.unlink(missing_ok=True)
        env = host_env(host, SECRET_KEY=settings.SECRET_KEY, **self.shape.env())
        cluster = start_cluster(f"scaleout-{host.name}", log, env, prefix=host.prefix())
        stack.callback(cluster.stop, timeout=60)
        return cluster

    def batch(self, hosts: SimulatedHosts, clusters: list[ClusterProcess]) -> dict[str, Any]:
        from agentruns.models import Configuration, Run

        count = len(clusters)
        n = count * self.opts["runs_per_host"]
        latency_ms, turns = self.opts["latency_ms"], self.opts["turns"]
        slug = self.configuration(f"scaleout-{count}x", latency_ms=latency_ms, turns=turns)
        config_id = Configuration.objects.get(slug=slug).pk
        vacuum_hot_tables()

        def pids() -> list[int]:
            return [pid for cluster in clusters for pid in cluster.pids()]

        pgbouncer = CpuWindow(hosts.pgbouncer_pids)
        # The server's CPU counts every database on it; its backends serving this one
        # (PgBouncer's server connections) are what the hosts cost, on a shared machine too.
        backends = CpuWindow(database_backends)
        with transaction.atomic():
            ids = self.submit(slug, n)
        start = timezone.now()
        ideal = (turns + 1) * latency_ms / 1000
        pgbouncer.start()
        backends.start()
        with Sampler(config_id, pids=pids) as sampler:
            self.wait_terminal(ids, timeout=ideal * 20 + 300, configuration_id=config_id)
        bouncer, served = pgbouncer.stop(), backends.stop()
        runs = Run.objects.filter(pk__in=ids)
        wall = (runs.aggregate(end=Max("updated_at"))["end"] - start).total_seconds()
        statuses = dict(runs.order_by().values_list("status").annotate(n=Count("id")))
        cpu = sampler.cpu
        row: dict[str, Any] = {
            "hosts": count,
            "in_flight": n,
            "wall_s": round(wall, 2),
            "ideal_s": ideal,
            "efficiency": round(ideal / wall, 3),
            "runs_per_s": round(n / wall, 1),
            "completed": statuses.get(Run.Status.COMPLETED, 0),
            "max_running": sampler.max_running,
            "server_connections": sampler.max_connections_db,
        }
        if cpu is not None:
            row.update(cpu_figures(cpu, n))
            row["cpu_ms_per_run_pgbouncer"] = round(
                1000 * (bouncer.cluster_s if bouncer else 0) / n, 2
            )
            row["cpu_ms_per_run_postgres_this_db"] = round(
                1000 * (served.cluster_s if served else 0) / n, 2
            )
            row["postgres_cores"] = round(cpu.postgres_s / wall, 2)
            # Near 1: the hosts were held by their quotas, as machines of that size would
            # be. Well below it while the cores were all busy: by the machine, whose
            # other load then muddies the scaling.
            quota = count * (self.opts["cpus"] or os.cpu_count() or 1)
            row["quota_used"] = round(cpu.cluster_s / (wall * quota), 2)
        if row["completed"] != n:
            row["statuses"] = statuses
        self.say(
            f"PERF-12 hosts={count} in-flight={n} wall_s={wall:.2f} runs/s={row['runs_per_s']} "
            f"({ideal / wall:.0%} of ideal) completed={row['completed']}/{n} "
            f"server connections={row['server_connections']}"
            + (
                f" {cpu_words(row)}, of which this database's backends "
                f"{row['cpu_ms_per_run_postgres_this_db']:.1f}; PgBouncer "
                f"{row['cpu_ms_per_run_pgbouncer']:.1f}; PostgreSQL {row['postgres_cores']} "
                f"cores; the hosts used {row['quota_used']:.0%} of their quota"
                if cpu
                else ""
            )
        )
        return row

    def report(self, result: dict[str, Any]) -> None:
        for count, figures in result["by_hosts"].items():
            scaling = figures.get("scaling")
            self.say(
                f"{'PERF-12 ' + str(count) + ' host(s), runs/s':<40} "
                f"{figures['runs_per_s']:>7.1f}  scaling "
                + (f"{scaling:.0%}" if scaling is not None else "-")
                + f"  PostgreSQL {figures.get('postgres_cores', '?')} cores"
            )
        saturated = result.get("saturates_at")
        verdict = result.get("perf12_ok")
        if verdict is not None:
            self.say(
                f"{'PERF-12 target: >= 80 % of linear':<40} {'ok' if verdict else 'MISSED'}"
                + (f" (PostgreSQL saturated at {saturated} hosts)" if saturated else "")
            )


def summarise(result: dict[str, Any]) -> None:
    """Per host count, the median batch; scaling against the single host's runs/s; the first
    count at which PostgreSQL took most of what the hosts' quotas leave it."""
    rows: dict[int, list[dict[str, Any]]] = {}
    for row in result["rows"]:
        rows.setdefault(row["hosts"], []).append(row)
    by_hosts: dict[int, dict[str, Any]] = {}
    for count, batches in sorted(rows.items()):
        middle = sorted(batches, key=lambda r: r["runs_per_s"])[len(batches) // 2]
        by_hosts[count] = dict(middle)
    one = by_hosts.get(1)
    cores = result["machine"].get("cores") or 1
    result["saturates_at"] = None
    for count, figures in by_hosts.items():
        if one:
            figures["scaling"] = round(figures["runs_per_s"] / (count * one["runs_per_s"]), 3)
        left = max(0.0, cores - count * result["host_cpus"])
        if (
            result["saturates_at"] is None
            and left
            and figures.get("postgres_cores", 0) >= SATURATED_SHARE * left
        ):
            result["saturates_at"] = count
    result["by_hosts"] = by_hosts
    judged = [
        figures["scaling"]
        for count, figures in by_hosts.items()
        if "scaling" in figures
        and (result["saturates_at"] is None or count < result["saturates_at"])
    ]
    result["perf12_ok"] = all(s >= PERF12_TARGET for s in judged) if len(judged) > 1 else None


def database_backends() -> list[int]:
    """The server processes connected to this database, but this command's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in cursor.fetchall()]
