"""OPS-8: the cluster stops on SIGTERM to its whole process group (systemd's default stop)
and on SIGTERM to its main process alone (a container's stop), as on Ctrl-C (SIGINT to the
group): exiting 0, nothing left running in its group. Idle, within 30 s; busy, within
10 s, with every run it held handed back rather than left to its lease. The group's
SIGTERM to a busy cluster used to hang its main process for ever (issue 48, item 7)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from agentruns.models import Run
from tests.support.clusters import configuration, running_clusters
from tests.support.runs import submit_batch

pytestmark = pytest.mark.django_db(transaction=True)

HOW = {
    "SIGTERM to the group": (True, signal.SIGTERM),
    "SIGTERM to the main process": (False, signal.SIGTERM),
    "SIGINT to the group": (True, signal.SIGINT),
}


@pytest.fixture
def clusters(transactional_db, tmp_path):
    yield from running_clusters(tmp_path)


def send(cluster, how: str) -> None:
    group, signum = HOW[how]
    if group:
        os.killpg(cluster.pid, signum)
    else:
        os.kill(cluster.pid, signum)


def stopped_cleanly(clusters, cluster, timeout: float) -> None:
    clusters.wait(lambda: not cluster.alive(), timeout=timeout, what="the main process to exit")
    clusters.wait(lambda: not cluster.pids(), timeout=5, what="every cluster process to exit")
    assert cluster.popen.returncode == 0, cluster.log()


@pytest.mark.parametrize("how", ["SIGTERM to the group", "SIGTERM to the main process"])
def test_ops8_sigterm_stops_an_idle_cluster_within_30_seconds(clusters, how):
    cluster = clusters.start("stop")
    clusters.wait(
        lambda: "started:" in cluster.log() and len(cluster.pids()) >= 4,
        timeout=60,
        what="the cluster's sentinel, pusher, monitor and workers",
    )
    send(cluster, how)
    stopped_cleanly(clusters, cluster, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("how", list(HOW))
def test_ops8_a_busy_cluster_stops_within_10_seconds_and_hands_its_runs_back(clusters, how):
    """Twenty runs whose provider answers after 2 s: the signal finds workers mid-step,
    their heartbeats and sweeper running. Each run goes back to `queued` at its next step
    boundary; none is left `running` for its lease to expire."""
    slow = configuration(
        "ops8-busy",
        [{"tool_calls": [{"name": "test.echo", "arguments": {"text": "x"}}]}, {"text": "done"}],
        latency_ms=2000,
    )
    cluster = clusters.start("busy", AGENTRUNS_SHUTDOWN_SECONDS=6)
    runs = submit_batch(slow, 20)
    clusters.wait(
        lambda: Run.objects.filter(status=Run.Status.RUNNING).count() >= 10,
        timeout=60,
        what="runs in flight",
    )
    sent = time.monotonic()
    send(cluster, how)
    stopped_cleanly(clusters, cluster, timeout=10)
    assert time.monotonic() - sent < 10
    statuses = dict(Run.objects.filter(pk__in=[run.pk for run in runs]).values_list("pk", "status"))
    assert Run.Status.RUNNING not in statuses.values(), (statuses, cluster.log()[-4000:])
