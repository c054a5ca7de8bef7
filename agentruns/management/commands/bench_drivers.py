"""`manage.py bench_drivers`: threads against asyncio as the way a worker process drives its
runs (PERF-6), on a proxy turn both can run (`agentruns/bench/drivers.py` says what it is),
in pairs taken in turn at each size; prints each driver's median with the range of its
batches, and the difference of each pair."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentruns.bench import harness
from agentruns.bench.drivers import DRIVERS, Proxy, calibrated_rounds, drop_tables, measure
from agentruns.cluster.driver import GC_YOUNG_THRESHOLD
from agentruns.store import on_postgres
from agentruns.store.connection import database_url


class Command(BaseCommand):
    help = "Measure threads against asyncio as a worker's driver on a proxy turn (PERF-6)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sizes", default="1000")
        parser.add_argument("--pairs", type=int, default=4)
        parser.add_argument("--processes", type=int, default=2)
        parser.add_argument("--work-ms", type=float, default=1.0, help="Python CPU per turn.")
        parser.add_argument("--latency-ms", type=int, default=1000)
        parser.add_argument("--turns", type=int, default=3)
        out = Path(settings.VAR_DIR) / "bench"
        parser.add_argument("--json", default=str(out / "bench_drivers.json"))

    def handle(self, *args: Any, **opts: Any) -> None:
        if not on_postgres():
            raise CommandError("bench_drivers needs PostgreSQL (set DATABASE_URL).")
        proxy = Proxy(
            url=database_url(),
            turns=opts["turns"],
            latency_s=opts["latency_ms"] / 1000,
            rounds=calibrated_rounds(opts["work_ms"]),
            gc_young=GC_YOUNG_THRESHOLD,
        )
        result: dict[str, Any] = {
            "benchmark": "bench_drivers",
            "machine": harness.machine(),
            "proxy": {"turns": proxy.turns, "latency_s": proxy.latency_s, "pool": proxy.pool},
            "work_ms": opts["work_ms"],
            "batches": [],
        }
        try:
            for n in harness.csv_ints(opts["sizes"]):
                for pair in range(opts["pairs"]):
                    for driver in DRIVERS:
                        row = {**measure(driver, proxy, n, opts["processes"]), "pair": pair}
                        result["batches"].append(row)
                        self.say(
                            f"{driver:<8} in-flight={n} processes={opts['processes']} "
                            f"wall_s={row['wall_s']:.2f} efficiency={row['efficiency']:.0%}"
                        )
        finally:
            with psycopg.connect(proxy.url, autocommit=True) as conn:
                drop_tables(conn)
        result["by_size"] = {
            driver: harness.by_size(
                [row for row in result["batches"] if row["driver"] == driver], ("efficiency",)
            )
            for driver in DRIVERS
        }
        self.report(result)
        self.say(harness.write_result(result, Path(opts["json"]), None, None))

    def report(self, result: dict[str, Any]) -> None:
        for n in result["by_size"]["threads"]:
            for driver in DRIVERS:
                spread = result["by_size"][driver][n]["efficiency"]
                self.say(
                    f"{driver + ' ' + str(n) + ' in flight, % of ideal':<36} "
                    f"{spread['median']:>5.0%}  (range {spread['min']:.0%} - {spread['max']:.0%})"
                )
            pairs: dict[int, dict[str, float]] = {}
            for row in result["batches"]:
                if row["in_flight"] == n:
                    pairs.setdefault(row["pair"], {})[row["driver"]] = row["efficiency"]
            gains = [p["asyncio"] - p["threads"] for p in pairs.values() if len(p) == 2]
            self.say(
                f"{'asyncio - threads, per pair':<36} "
                + " ".join(f"{gain * 100:+.0f}" for gain in gains)
                + f" points (median {statistics.median(gains) * 100:+.0f})"
            )

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
