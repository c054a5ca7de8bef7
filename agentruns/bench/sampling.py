"""What `bench_cluster` samples while a batch runs: PostgreSQL connections, runs running at
once, the cluster's resident memory (PERF-6, PERF-7), and the CPU the batch took.

A batch of a thousand runs on two cores is bound by CPU, and how much CPU a run takes moves
with the machine from minute to minute: each batch says how busy the cores were and what
the cluster and the database server spent per run, so figures from two machines (or two
minutes) can be read side by side."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection

from agentruns.procfs import stat_fields


def pss_kb(pids: list[int]) -> int:
    """Proportional set size of these processes (Linux): forked workers share pages with
    their parent, and PSS counts each shared page once across them, unlike RSS."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                break
    return total


def _ticks(pid: int) -> int:
    """A process's user and system CPU, all its threads, in clock ticks (0 once gone)."""
    fields = stat_fields(pid)
    return 0 if fields is None else int(fields[11]) + int(fields[12])


def postgres_pids() -> list[int]:
    """The database server's processes on this machine: its backends and its helpers (the
    WAL writer, the checkpointer), which Linux all names `postgres`."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text() == "postgres\n":
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _machine_ticks() -> tuple[int, int]:
    """(busy, all) clock ticks of every core since boot; idle and I/O wait are not busy.
    The first eight columns (user to steal): the guest columns repeat part of user's."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


@dataclass(frozen=True)
class CpuUse:
    busy: float  # the share of all cores' time that was busy
    cluster_s: float
    postgres_s: float


class CpuWindow:
    """The CPU spent between `start` and `stop`: the machine's, the given processes' and
    the database server's (Linux; None elsewhere)."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self._start: tuple[tuple[int, int], dict[int, int], dict[int, int]] | None = None

    def start(self) -> None:
        if Path("/proc/stat").exists():
            self._start = (_machine_ticks(), self._each(self.pids()), self._each(postgres_pids()))

    def stop(self) -> CpuUse | None:
        if self._start is None:
            return None
        (busy, total), cluster, server = self._start
        now_busy, now_total = _machine_ticks()
        tick = os.sysconf("SC_CLK_TCK")
        return CpuUse(
            busy=round((now_busy - busy) / max(1, now_total - total), 3),
            cluster_s=self._spent(cluster, self.pids()) / tick,
            postgres_s=self._spent(server, postgres_pids()) / tick,
        )

    @staticmethod
    def _each(pids: list[int]) -> dict[int, int]:
        return {pid: _ticks(pid) for pid in pids}

    @staticmethod
    def _spent(before: dict[int, int], pids: list[int]) -> int:
        """Ticks since `before` of the processes alive now (one started since counts whole,
        one gone since is lost: the cluster's and the server's processes outlive a batch)."""
        return sum(max(0, _ticks(pid) - before.get(pid, 0)) for pid in pids)


def cpu_figures(cpu: CpuUse | None, runs: int) -> dict[str, float]:
    """A batch's CPU: the cores' busy share, and per run the cluster's and PostgreSQL's."""
    if cpu is None:
        return {}
    cluster = round(1000 * cpu.cluster_s / runs, 2)
    postgres = round(1000 * cpu.postgres_s / runs, 2)
    return {
        "cpu_busy": cpu.busy,
        "cpu_ms_per_run": round(cluster + postgres, 2),
        "cpu_ms_per_run_cluster": cluster,
        "cpu_ms_per_run_postgres": postgres,
    }


def cpu_words(figures: dict[str, Any]) -> str:
    return (
        f"cores {figures['cpu_busy']:.0%} busy, {figures['cpu_ms_per_run']:.1f} ms CPU a run "
        f"(cluster {figures['cpu_ms_per_run_cluster']:.1f}, "
        f"PostgreSQL {figures['cpu_ms_per_run_postgres']:.1f})"
    )


# Memory is sampled less often than the rest: reading a process's smaps walks all of its
# page tables under its memory-map lock, and at every 0.25 s it took about 3 % of the
# machine's CPU (perf, 1000 in flight), slowing the cluster it measures.
PSS_EVERY = 4


@dataclass
class Sampler:
    """Samples every 0.25 s (memory every second) in a thread of its own until the `with`
    block ends, and the CPU spent over the whole block (`cpu`)."""

    configuration_id: int
    pids: Callable[[], list[int]] = list
    max_connections: int = 0
    max_connections_db: int = 0
    max_running: int = 0
    max_pss_kb: int = 0
    cpu: CpuUse | None = None
    _window: CpuWindow | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Sampler:
        self._window = CpuWindow(self.pids)
        self._window.start()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._window:  # before the sampling thread's last sleep
            self.cpu = self._window.stop()
        self._stop.set()
        if self._thread:
            self._thread.join()

    def _loop(self) -> None:
        from agentruns.models import Run

        try:
            tick = 0
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
                if tick % PSS_EVERY == 0:
                    self.max_pss_kb = max(self.max_pss_kb, pss_kb(self.pids()))
                tick += 1
        finally:
            connection.close()
