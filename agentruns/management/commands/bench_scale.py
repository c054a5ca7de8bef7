"""PERF-8 (SPEC §14): seed a year of history on a database of its own (`make bench-scale`:
1 million runs, 10 million events by default, in SQL, once) and time the run list, a run's
events, the inbox and the audit export through the real views; p95 under 100 ms each.
Prints every probe, then the plans of their slowest statements.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from agentruns.bench import harness, scale
from agentruns.bench.seed import History
from agentruns.store import on_postgres


class Command(BaseCommand):
    help = "Seed a year of history and measure the pages that read it (PERF-8)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=1_000_000)
        parser.add_argument("--events-per-run", type=int, default=10)
        parser.add_argument("--active-tickets", type=int, default=20)
        parser.add_argument("--samples", type=int, default=40, help="Requests per probe.")
        parser.add_argument("--only", default="", help="Only the probes whose name has this.")
        parser.add_argument(
            "--force",
            action="store_true",
            help="Seed a database whose name says neither bench nor test.",
        )
        harness.add_options(parser, "bench_scale", peers="present")

    def handle(self, *args: Any, **opts: Any) -> None:
        if not on_postgres():
            raise CommandError("bench_scale needs PostgreSQL (set DATABASE_URL).")
        # WhiteNoise warns on every request when collectstatic has not run; pages render.
        warnings.filterwarnings("ignore", "No directory at", UserWarning)
        name = connection.settings_dict["NAME"]
        if not opts["force"] and "bench" not in name and "test" not in name:
            raise CommandError(
                f"bench_scale seeds millions of rows into {name!r}: give it a database of its "
                "own (make bench-scale uses BENCH_SCALE_URL), or pass --force."
            )
        python = harness.peers_chosen(opts["peers"], self.say)
        history = History(
            runs=opts["runs"],
            events_per_run=opts["events_per_run"],
            active_tickets=opts["active_tickets"],
        )
        result: dict[str, Any] = {"benchmark": "bench_scale", "machine": harness.machine()}
        self.say(
            f"bench_scale on {name}: {opts['runs']:,} runs x {opts['events_per_run']} events, "
            f"{result['machine']['cores']} cores, load {result['machine']['load_before']}"
        )
        fixture = scale.prepare(history, self.say)
        result["rows"] = table_rows()
        self.say("rows: " + ", ".join(f"{n:,} {t}" for t, n in result["rows"].items()))
        clients = scale.clients(fixture)
        probes = [p for p in scale.probes(fixture) if opts["only"] in p.name]
        self.say(f"{'probe':<44} {'p50':>7} {'p95':>7} {'max':>7} {'SQL':>4}  ms (target p95)")
        rows = []
        for index, probe in enumerate(probes):
            row = scale.measure(probe, clients[probe.who], opts["samples"], seed=index)
            rows.append(row)
            verdict = "ok" if row["p95_ms"] <= scale.TARGET_MS else "MISSED"
            if not row["judged"]:
                verdict = f"({row['bytes'] // 1024} KB: not judged)"
            self.say(
                f"{probe.name:<44} {row['p50_ms']:>7.1f} {row['p95_ms']:>7.1f} "
                f"{row['max_ms']:>7.1f} {row['statements']:>4}  {verdict}"
                + ("" if row["statuses"] == [200] else f"  HTTP {row['statuses']}")
            )
        result["probes"] = rows
        result["target_ms"] = scale.TARGET_MS
        self.explain(rows)
        plot = Path(opts["plot"]) if opts["plot"] else None
        self.say(harness.write_result(result, Path(opts["json"]), plot, python))

    def explain(self, rows: list[dict[str, Any]]) -> None:
        """The plan of each probe's slowest statement (once per distinct statement)."""
        seen: set[str] = set()
        for row in rows:
            for statement in row["slowest"][:1]:
                sql = statement["sql"]
                plan = scale.explain(sql) if sql not in seen else ""
                seen.add(sql)
                statement["plan"] = plan
                if plan:
                    self.say(f"\n-- {row['probe']}: {statement['ms']} ms\n{short(sql)}\n{plan}")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()


def short(sql: str) -> str:
    """The statement with a long select list elided (the JSON keeps it whole)."""
    return re.sub(r"^SELECT (.{80,}?) FROM ", "SELECT … FROM ", sql, count=1, flags=re.S)


def table_rows() -> dict[str, int]:
    """Rows per seeded table, from the planner's statistics (a count(*) of ten million
    rows would be the slowest thing the benchmark did)."""
    tables = {
        "runs": "agentruns_run",
        "events": "agentruns_event",
        "tickets": "agentruns_ticket",
        "gate audit": "agentruns_gateaudit",
        "invocations": "agentruns_toolinvocation",
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, greatest(reltuples, 0)::bigint FROM pg_class WHERE relname = ANY(%s)",
            [list(tables.values())],
        )
        found = dict(cursor.fetchall())
    return {label: int(found.get(table, 0)) for label, table in tables.items()}
