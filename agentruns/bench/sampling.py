"""What `bench_cluster` samples while a batch runs: PostgreSQL connections, runs running at
once, and the cluster's resident memory (PERF-6, PERF-7)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection


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


# Memory is sampled less often than the rest: reading a process's smaps walks all of its
# page tables under its memory-map lock, and at every 0.25 s it took about 3 % of the
# machine's CPU (perf, 1000 in flight), slowing the cluster it measures.
PSS_EVERY = 4


@dataclass
class Sampler:
    """Samples every 0.25 s (memory every second) in a thread of its own until the `with`
    block ends."""

    configuration_id: int
    pids: Callable[[], list[int]] = list
    max_connections: int = 0
    max_connections_db: int = 0
    max_running: int = 0
    max_pss_kb: int = 0
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
