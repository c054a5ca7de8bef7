"""OPS-8: SIGTERM to the cluster's whole process group (systemd's default stop) stops it
within 30 s, leaving nothing running and exiting 0; so does SIGTERM to its main process
alone (a container's stop). The review saw the group's SIGTERM hang the main process (6 of
6 times, docs/operators.md); an idle cluster here stops either way, so this pins the
behaviour rather than reproducing the hang (issue 48, item 7, is still open)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.clusters import running_clusters

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clusters(transactional_db, tmp_path):
    yield from running_clusters(tmp_path)


@pytest.mark.parametrize("whom", ["group", "main process"])
def test_ops8_sigterm_stops_the_cluster_within_30_seconds(clusters, whom):
    cluster = clusters.start("stop")
    clusters.wait(
        lambda: "started:" in cluster.log() and len(cluster.pids()) >= 4,
        timeout=60,
        what="the cluster's sentinel, pusher, monitor and workers",
    )
    if whom == "group":
        os.killpg(cluster.pid, signal.SIGTERM)
    else:
        os.kill(cluster.pid, signal.SIGTERM)
    clusters.wait(lambda: not cluster.alive(), timeout=30, what="the main process to exit")
    clusters.wait(lambda: not cluster.pids(), timeout=5, what="every cluster process to exit")
    assert cluster.popen.returncode == 0, cluster.log()
