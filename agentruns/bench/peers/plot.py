"""Draw a benchmark's JSON result as a PNG, ours beside the peers (run from .venv-peers, so
matplotlib stays out of the project's dependencies).

    python -m agentruns.bench.peers.plot RESULT.json OUT.png
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter

STYLE = {
    "agentruns": {"color": "tab:blue", "marker": "o"},
    "langgraph": {"color": "tab:orange", "marker": "s"},
    "langgraph_async": {"color": "tab:orange", "marker": "s"},
    "dbos": {"color": "tab:green", "marker": "^"},
}


def series(rows: list[dict[str, Any]], x: str, y: str) -> dict[str, tuple[list, list]]:
    out: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in sorted(rows, key=lambda r: r[x]):
        if row.get(y) is not None:
            out[row["system"]][0].append(row[x])
            out[row["system"]][1].append(row[y])
    return out


def lines(ax: Any, rows: list[dict[str, Any]], x: str, y: str, scale: float = 1.0) -> None:
    for system, (xs, ys) in series(rows, x, y).items():
        ax.plot(xs, [v * scale for v in ys], label=system, **STYLE.get(system, {}))


def medians(ax: Any, by_system: dict[str, dict], figure: str, scale: float = 1.0) -> None:
    """Each system's median per size, the range of its batches as error bars."""
    for system, sizes in by_system.items():
        points = sorted(
            (int(n), figures[figure]) for n, figures in sizes.items() if figure in figures
        )
        if not points:
            continue
        spreads = [spread for _, spread in points]
        middle = [spread["median"] * scale for spread in spreads]
        below = [(spread["median"] - spread["min"]) * scale for spread in spreads]
        above = [(spread["max"] - spread["median"]) * scale for spread in spreads]
        ax.errorbar(
            [n for n, _ in points],
            middle,
            yerr=[below, above],
            capsize=3,
            label=f"{system} (median, range)",
            **STYLE.get(system, {}),
        )


def bench(result: dict[str, Any], fig: Any) -> None:
    time_ax, bytes_ax = fig.subplots(1, 2)
    rows = result["lengths"]
    lines(time_ax, rows, "steps", "ms_per_step")
    floors = {"floor": ("--", "durable commit"), "floor_no_wal": (":", "temp-table commit")}
    for name, (style, label) in floors.items():
        if name in result["figures"]:
            median = result["figures"][name]["median"]
            time_ax.axhline(median, color="grey", linestyle=style, label=label)
    time_ax.set(xscale="log", xlabel="durable steps per run", ylabel="ms per durable step")
    time_ax.set_title("Loop overhead per durable step (PERF-1)")
    lines(bytes_ax, rows, "steps", "bytes_per_run", 1 / 1024)
    bytes_ax.set(xscale="log", yscale="log", xlabel="durable steps per run", ylabel="KB stored")
    bytes_ax.set_title("Stored per run (PERF-3)")
    for ax in (time_ax, bytes_ax):
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()


def cluster(result: dict[str, Any], fig: Any) -> None:
    eff_ax, mem_ax = fig.subplots(1, 2)
    by_system = result["perf6_by_size"]
    medians(eff_ax, by_system, "efficiency", 100)
    eff_ax.axhline(80, color="grey", linestyle="--", label="PERF-6 target, at 1000")
    eff_ax.set(xlabel="runs in flight", ylabel="% of ideal throughput", ylim=(0, 105))
    latency = result["perf6"][0]["latency_s"] if result["perf6"] else 1
    eff_ax.set_title(f"Concurrency, {latency:g} s provider, {result['batches']} batches (PERF-6)")
    medians(mem_ax, by_system, "kb_per_in_flight")
    # PERF-7 is judged at 1000 in flight: below that a batch's fixed heap growth (threads,
    # caches) is shared by fewer runs, so small batches sit above the line by design.
    mem_ax.axhline(300, color="grey", linestyle="--", label="PERF-7 target, at 1000")
    mem_ax.set(xlabel="runs in flight", ylabel="KB resident per in-flight run")
    mem_ax.set_title("Memory per in-flight run (PERF-7)")
    for ax in (eff_ax, mem_ax):
        ax.grid(True, alpha=0.3)
        ax.legend()


def scale(result: dict[str, Any], fig: Any) -> None:
    ax = fig.subplots(1, 1)
    rows = result["probes"]
    names = [row["probe"] for row in rows]
    ax.barh(names, [row["p95_ms"] for row in rows], color="tab:blue", label="p95")
    ax.scatter([row["p50_ms"] for row in rows], names, color="black", zorder=3, label="p50")
    ax.axvline(result["target_ms"], color="grey", linestyle="--", label="PERF-8 target")
    ax.invert_yaxis()
    runs = result["rows"]
    ax.set(xlabel="ms per request (test client, the real views)")
    ax.set_title(f"{runs['runs']:,} runs, {runs['events']:,} events (PERF-8)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend()


def scaleout(result: dict[str, Any], fig: Any) -> None:
    rate_ax, cpu_ax = fig.subplots(1, 2)
    by_hosts = sorted((int(n), figures) for n, figures in result["by_hosts"].items())
    hosts = [n for n, _ in by_hosts]
    rates = [figures["runs_per_s"] for _, figures in by_hosts]
    rate_ax.plot(hosts, rates, label="agentruns", **STYLE["agentruns"])
    if rates:
        one = rates[0] / hosts[0]
        rate_ax.plot(hosts, [n * one for n in hosts], color="grey", linestyle=":", label="linear")
        rate_ax.plot(
            hosts, [0.8 * n * one for n in hosts], color="grey", linestyle="--", label="80 %"
        )
    rate_ax.set(xlabel="cluster hosts", ylabel="runs/s", xticks=hosts)
    rate_ax.set_title(
        f"Scale-out, {result['host_cpus']:g} cores a host, {result['runs_per_host']} runs a "
        "host (PERF-12)"
    )
    for key, label in (("cpu_ms_per_run_cluster", "cluster"),
                       ("cpu_ms_per_run_postgres", "PostgreSQL (whole server)"),
                       ("cpu_ms_per_run_postgres_this_db", "PostgreSQL (this database)"),
                       ("cpu_ms_per_run_pgbouncer", "PgBouncer")):  # fmt: skip
        cpu_ax.plot(hosts, [figures.get(key) for _, figures in by_hosts], marker="o", label=label)
    cpu_ax.set(xlabel="cluster hosts", ylabel="ms CPU a run", xticks=hosts)
    cpu_ax.set_title("Where a run's CPU goes")
    for ax in (rate_ax, cpu_ax):
        ax.grid(True, alpha=0.3)
        ax.legend()


def main(source: str, target: str) -> None:
    with open(source) as f:
        result = json.load(f)
    fig = plt.figure(figsize=(12, 4.8), layout="constrained")
    draw = {
        "bench": bench,
        "bench_cluster": cluster,
        "bench_scale": scale,
        "bench_scaleout": scaleout,
    }
    draw[result["benchmark"]](result, fig)
    machine = result.get("machine", {})
    fig.suptitle(
        f"{result['benchmark']} {machine.get('date', '')}: {machine.get('cores', '?')} cores "
        f"{machine.get('cpu', '')}, load {machine.get('load_before', '?')}",
        fontsize=9,
    )
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
