"""PERF-1..PERF-4 (SPEC §14), ours beside the peers, measured in the same run.

Rounds interleave the floor (a bare INSERT + COMMIT), our reference run, LangGraph and DBOS,
so a noisy neighbour hits all of them alike; every figure is printed as min / median / max
over the rounds and every ratio is taken within a round. A sweep over run lengths (one
call per turn) gives PERF-3 and the plot. The peers run from `.venv-peers`, installed on
first use (`--peers install`, the default) and never a project dependency.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentruns.bench import harness, loop, workload
from agentruns.cluster.driver import warm_up
from agentruns.store import on_postgres
from agentruns.store.connection import database_url

PEERS = ("langgraph", "dbos")
TARGETS = {"floor": 3.0, "floor_no_wal": 3.0, "langgraph": 0.35}  # PERF-1
FLOORS = ("floor", "floor_no_wal")
PERF2_TARGET, PERF3_TARGET = 2.0, 1.2


class Command(BaseCommand):
    help = "Measure loop overhead, statements per step, storage growth and resume reads."

    def add_arguments(self, parser: CommandParser) -> None:
        # Each side's window in a round is a few hundred milliseconds at most: on a shared
        # machine a hiccup of that order moved a three-round median of 20 runs by a tenth.
        parser.add_argument("--runs", type=int, default=60, help="Reference runs per round.")
        parser.add_argument("--rounds", type=int, default=5)
        parser.add_argument("--floor-rounds", type=int, default=2000)
        parser.add_argument(
            "--lengths",
            default="5,20,50,100,200",
            help="Run lengths (turns of one call) for PERF-3 and the plot.",
        )
        parser.add_argument(
            "--length-steps",
            type=int,
            default=400,
            help="Durable steps measured per length (runs = this / steps per run).",
        )
        parser.add_argument("--resume-turns", default="5,50", help="PERF-4's history lengths.")
        harness.add_options(parser, "bench", peers="install")
        parser.add_argument(
            "--daily-limit",
            type=int,
            default=None,
            help="Give the reference configuration a (never reached) daily token limit, so "
            "PERF-1/PERF-2 include OPS-2's check before every model turn.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not on_postgres():
            raise CommandError("The benchmark measures PostgreSQL: set DATABASE_URL.")
        settings.AGENTRUNS_MAX_TURNS = 10_000  # the sweep runs 200 turns
        warm_up()  # this process measures the loop as a cluster worker runs it
        self.user = workload.bench_user()
        self.opts = opts
        self.python = harness.peers_chosen(opts["peers"], self.say)
        self.errors: list[str] = []
        result: dict[str, Any] = {
            "benchmark": "bench",
            "machine": harness.machine(),
            "peers": {"versions": harness.peer_versions(self.python)},
        }
        turns, calls = loop.REFERENCE
        self.say(
            f"bench: {result['machine']['cores']} cores ({result['machine']['cpu']}), "
            f"PostgreSQL {result['machine']['postgresql']}, load "
            f"{result['machine']['load_before']}; reference {turns} turns x {calls} calls = "
            f"{loop.steps(turns, calls)} durable steps, {opts['runs']} runs x "
            f"{opts['rounds']} rounds; peers: {self.peer_note()}"
        )
        result["rounds"] = [self.round() for _ in range(opts["rounds"])]
        result["figures"] = {
            name: harness.spread([r[name] for r in result["rounds"]])
            for name in (*FLOORS, "agentruns", *PEERS)
            if all(r.get(name) is not None for r in result["rounds"])
        }
        result["ratios"] = self.ratios(result["rounds"])
        result["lengths"] = self.lengths()
        result["perf2"] = self.perf2()
        result["perf3"] = self.perf3(result["lengths"])
        result["perf4"] = self.perf4()
        result["peers"]["errors"] = self.errors
        self.report(result)
        plot = Path(opts["plot"]) if opts["plot"] else None
        self.say(harness.write_result(result, Path(opts["json"]), plot, self.python))

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def peer_note(self) -> str:
        if self.python is None:
            return "not measured (--peers skip, or .venv-peers absent with --peers present)"
        versions = harness.peer_versions(self.python)
        return ", ".join(f"{k} {v}" for k, v in versions.items() if k in ("langgraph", "dbos"))

    # ---- measurements ---------------------------------------------------------------------

    def peer(self, module: str, env: dict[str, str]) -> list[dict[str, Any]]:
        python = sys.executable if module == "floor" else self.python
        if python is None:
            return []
        try:
            return harness.run_peer(python, module, env)
        except harness.PeerFailed as failed:
            self.errors.append(str(failed))
            self.say(f"  {failed}")
            return []

    def round(self) -> dict[str, float | None]:
        turns, calls = loop.REFERENCE
        floor = self.peer(
            "floor",
            {"PEER_DB": database_url(), "ROUNDS": str(self.opts["floor_rounds"])},
        )
        config = loop.reference_configuration(self.opts["daily_limit"])
        ours, _ = loop.timed_runs(config, self.user, self.opts["runs"], turns, calls)
        row: dict[str, float | None] = {
            "floor": floor[0]["ms_per_commit"] if floor else None,
            "floor_no_wal": floor[0]["ms_per_commit_no_wal"] if floor else None,
            "agentruns": ours,
        }
        for name in PEERS:
            env = {
                "PEER_DB": harness.peer_database(name),
                "SHAPES": f"{turns}x{calls}:{self.opts['runs']}",
            }
            seen = self.peer(f"{name}_loop", env)
            row[name] = seen[0]["ms_per_step"] if seen else None
        self.say(
            "  round: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row.items() if v is not None)
        )
        return row

    def ratios(self, rounds: list[dict[str, float | None]]) -> dict[str, Any]:
        out = {}
        for name in (*FLOORS, *PEERS):
            within = [
                ours / peer
                for r in rounds
                if (ours := r["agentruns"]) is not None and (peer := r.get(name))
            ]
            if within:
                out[name] = {**harness.spread(within), "target": TARGETS.get(name)}
        return out

    def lengths(self) -> list[dict[str, Any]]:
        """Ours at every length, then each peer in one process for all of them."""
        shapes = []
        for turns in harness.csv_ints(self.opts["lengths"]):
            per_run = loop.steps(turns, 1)
            runs = max(1, self.opts["length_steps"] // per_run)
            shapes.append({"turns": turns, "calls": 1, "steps": per_run, "runs": runs})
        points = [
            {
                **shape,
                "system": "agentruns",
                **loop.length_point(self.user, shape["turns"], 1, shape["runs"]),
            }
            for shape in shapes
        ]
        spec = ",".join(f"{s['turns']}x1:{s['runs']}" for s in shapes)
        for name in PEERS:
            env = {"PEER_DB": harness.peer_database(name), "SHAPES": spec}
            for shape, seen in zip(shapes, self.peer(f"{name}_loop", env), strict=False):
                points.append({**shape, "system": name, **_point(seen)})
        return points

    def perf2(self) -> dict[str, Any]:
        statements = loop.reference_statements(self.user, self.opts["daily_limit"])
        per_step = len(statements) / loop.steps(*loop.REFERENCE)
        return {"statements": len(statements), "per_step": per_step, "target": PERF2_TARGET}

    def perf3(self, points: list[dict[str, Any]]) -> dict[str, Any]:
        """Bytes per turn of the longest run against the shortest of at least 20 turns."""
        out: dict[str, Any] = {"target": PERF3_TARGET}
        for system in ("agentruns", *PEERS):
            mine = sorted((p for p in points if p["system"] == system), key=lambda p: p["turns"])
            if len(mine) < 2:
                continue
            small = next((p for p in mine if p["turns"] >= 20), mine[0])
            large = mine[-1]
            per_turn = [p["bytes_per_run"] / p["turns"] for p in (small, large)]
            out[system] = {
                "turns": [small["turns"], large["turns"]],
                "bytes_per_turn": per_turn,
                "ratio": per_turn[1] / per_turn[0],
            }
        return out

    def perf4(self) -> dict[str, Any]:
        lengths = harness.csv_ints(self.opts["resume_turns"])
        return {
            "turns": lengths,
            "statements": [loop.resume_statements(self.user, n) for n in lengths],
        }

    # ---- the report -----------------------------------------------------------------------

    def report(self, result: dict[str, Any]) -> None:
        self.say(f"{'':46} {'min':>8} {'median':>8} {'max':>8}")
        labels = {
            "floor": "floor: INSERT+COMMIT, durable",
            "floor_no_wal": "floor: INSERT+COMMIT, temp table (no WAL)",
        }
        for name, fig in result["figures"].items():
            label = labels.get(name, f"{name} per durable step")
            self.say(f"{label:<46} {_mmm(fig)} ms")
        for name in (*FLOORS, *PEERS):
            if name not in result["figures"]:
                self.say(f"{name + ' per durable step':<46} not measured")
        for name, ratio in result["ratios"].items():
            target = ratio["target"]
            verdict = (
                ""
                if target is None
                else f"  target <= {target:g}  {_ok(ratio['median'] <= target)}"
            )
            short = {"floor": "durable commit", "floor_no_wal": "temp-table commit"}
            label = "PERF-1 agentruns / " + short.get(name, name)
            self.say(f"{label:<46} {_mmm(ratio)} x{verdict}")
        perf2 = result["perf2"]
        self.say(
            f"{'PERF-2 statements per durable step':<46} {perf2['per_step']:>8.2f}"
            f"  ({perf2['statements']} per reference run)  target <= {PERF2_TARGET:g}  "
            f"{_ok(perf2['per_step'] <= PERF2_TARGET)}"
        )
        for system, row in result["perf3"].items():
            if system == "target":
                continue
            small, large = row["turns"]
            verdict = f"  target <= {PERF3_TARGET:g}  {_ok(row['ratio'] <= PERF3_TARGET)}"
            self.say(
                f"{'PERF-3 ' + system + f' bytes/turn {large} vs {small} turns':<46} "
                f"{row['bytes_per_turn'][1]:>8.0f} {row['bytes_per_turn'][0]:>8.0f} "
                f"{row['ratio']:>7.2f}x" + (verdict if system == "agentruns" else "")
            )
        perf4 = result["perf4"]
        constant = len(set(perf4["statements"])) == 1
        label = "PERF-4 statements to resume after " + "/".join(map(str, perf4["turns"]))
        self.say(
            f"{label + ' turns':<46} {' / '.join(map(str, perf4['statements']))}"
            f"  target constant  {_ok(constant)}"
        )


def _point(seen: dict[str, Any]) -> dict[str, Any]:
    return {"ms_per_step": seen["ms_per_step"], "bytes_per_run": seen["bytes_per_run"]}


def _mmm(fig: dict[str, Any]) -> str:
    return f"{fig['min']:>8.3f} {fig['median']:>8.3f} {fig['max']:>8.3f}"


def _ok(passed: bool) -> str:
    return "ok" if passed else "MISSED"
