"""CLU-1..CLU-3 on a real cluster: no single worker process's death stalls a machine.

A django-q2 worker waiting for a task holds its cluster's task-queue lock while it blocks
reading the queue's pipe; SIGKILLed there (the OOM killer's favourite moment) it dies
holding the lock, and no worker of that cluster ever receives a task again. Runs are
claimed from the database anyway: every worker process with free threads claims queued
and lease-expired runs itself on its heartbeat, so q2 only speeds wake-ups up."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentruns.cluster.process import ClusterProcess
from agentruns.models import Run
from tests.support.clusters import (
    Clusters,
    assert_log_consistent,
    configuration,
    running_clusters,
    wait_statuses,
)
from tests.support.runs import submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

READY = re.compile(r"ready for work at (\d+)")
READ_SYSCALL = "0"  # x86_64 read(2): blocked on the queue's pipe, holding its lock
LEASE_SECONDS = 3


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def worker_pids(cluster: ClusterProcess) -> list[int]:
    alive = set(cluster.pids())
    return [int(pid) for pid in READY.findall(cluster.log()) if int(pid) in alive]


def syscall(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return ""


def lock_holder(cluster: ClusterProcess) -> int | None:
    """The idle worker blocked inside the queue's read (the others wait for its lock)."""
    holders = [pid for pid in worker_pids(cluster) if syscall(pid) == READ_SYSCALL]
    return holders[0] if len(holders) == 1 else None


def test_clu1_an_idle_worker_sigkilled_holding_the_queue_lock_stalls_nothing(clusters):
    """CLU-1: SIGKILL the one idle q2 worker that holds the cluster's task-queue lock, then
    submit 50 runs: the surviving (and the reincarnated) workers' heartbeats claim them
    from the database, and all 50 complete, each exactly once, no attempt spent."""
    config = configuration(
        "clu-death",
        [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}, {"text": "done"}],
        latency_ms=50,
    )
    cluster = clusters.start("a", AGENTRUNS_Q_WORKERS=2, Q_LOG_LEVEL="INFO")
    clusters.wait(lambda: len(worker_pids(cluster)) == 2, timeout=60, what="two idle q2 workers")
    victim = clusters.wait(
        lambda: lock_holder(cluster), timeout=30, what="an idle worker to hold the queue lock"
    )
    os.kill(victim, signal.SIGKILL)
    clusters.wait(lambda: victim not in cluster.pids(), timeout=30, what="the worker to be gone")

    runs = submit_batch(config, 50)

    wait_statuses(runs, "completed", timeout=90, clusters=clusters)
    assert cluster.alive()
    assert_log_consistent(runs)
    finished = Run.objects.filter(pk__in=[r.pk for r in runs])
    assert [r.attempts for r in finished] == [0] * 50
