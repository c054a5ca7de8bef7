"""CLU-2, CLU-3, TOOL-4 on a real cluster while the database goes away under it.

Three ways, three times each while runs execute: every backend of the test database but
the test's own is terminated (`pg_terminate_backend`, what a restart looks like from the
clients); the server is restarted (`pg_ctlcluster … restart`, a clean shutdown); and the
server crashes (`stop -m immediate`, which loses the tail of steps committed without
waiting for the WAL flush). The workers' pooled connections, their heartbeats' and q2's own
all break mid-statement. Workers reconnect, every run completes, and no tool effect happens
twice."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from agentruns.models import Event, Run
from tests.support.clusters import (
    Clusters,
    assert_effects_once,
    assert_log_consistent,
    configuration,
    effect_lines,
    running_clusters,
    wait_statuses,
)
from tests.support.runs import submit_batch

# `serial`: it restarts the PostgreSQL server every other test's database lives on, so
# `make test` runs it alone, after the parallel run.
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.django_db(transaction=True)]

RUNS = 24
# Long enough (9 turns of a 1.2 s provider) that runs are still in flight at the third
# disruption: the runs keep going through each outage, asleep in their provider, so a
# fast machine that recovers in a second finishes 7 turns as the third one ends.
TURNS = 8
LATENCY_MS = 1200


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def drop_every_other_connection() -> int:
    """What a restart does to every client of this database but the caller."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def pg_ctlcluster(*args: str) -> int:
    """Restart or crash the server itself (the suite runs as root, as `make test` does)."""
    if os.geteuid() != 0:
        pytest.skip("restarting PostgreSQL needs root (CI and `make test` here run as root)")
    version = sorted(Path("/etc/postgresql").iterdir(), key=lambda p: float(p.name))[-1].name
    connection.close()  # this test's own connection dies with the server
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", *args],
        check=True,
        timeout=120,
        capture_output=True,
    )
    return 1


def restart_the_server() -> int:
    return pg_ctlcluster("restart", "-m", "fast")


def crash_the_server() -> int:
    pg_ctlcluster("stop", "-m", "immediate")
    return pg_ctlcluster("start")


def write_turn(n: int) -> dict:
    return {
        "tool_calls": [
            {"name": "test.external_write", "arguments": {"value": f"w{n}"}},
            {"name": "clock.now", "arguments": {}},
        ]
    }


@pytest.mark.parametrize(
    ("disrupt", "spends_attempts"),
    [
        pytest.param(drop_every_other_connection, False, id="connections-dropped"),
        # While the server is down a hand-back may not get through, and a crash may lose a
        # claim or a step: that run is reclaimed once its lease lapses, which spends an
        # attempt (CLU-3). Dropped connections alone never cost one.
        pytest.param(restart_the_server, True, id="server-restarted"),
        pytest.param(crash_the_server, True, id="server-crashed"),
    ],
)
def test_clu_runs_survive_the_database_going_away_mid_flight(
    clusters, disrupt: Callable[[], int], spends_attempts: bool
):
    """CLU-2, CLU-3, TOOL-4: 24 runs of eight tool turns each (an external write and a
    read per turn) on a two-worker cluster; the database goes away three times while they
    run (each way in turn, see the module's docstring). Every run completes, each log is consistent
    (no step written twice, every call paired), every external effect happened at most
    once, and every `ok` write exactly once. A dropped connection is database trouble, not
    a dead worker: the runs it interrupted are handed back without spending an attempt."""
    config = configuration(
        "db-drop",
        [*(write_turn(n) for n in range(TURNS)), {"text": "done"}],
        latency_ms=LATENCY_MS,
        exempt=["test.external_write"],
    )
    clusters.start("a")
    runs = submit_batch(config, RUNS)
    ids = [run.pk for run in runs]

    def logged() -> int:
        return Event.objects.filter(run_id__in=ids).count()

    dropped = []
    for _ in range(3):
        mark = logged()
        clusters.wait(
            lambda mark=mark: logged() >= mark + 20,
            timeout=60,
            what="the runs to make progress",
        )
        # Each outage must find runs in flight.
        assert Run.objects.filter(pk__in=ids).exclude(status__in=Run.TERMINAL).exists()
        dropped.append(disrupt())
    assert all(n > 0 for n in dropped), dropped

    wait_statuses(runs, "completed", timeout=180, clusters=clusters)
    assert clusters.started[0].alive()
    assert_log_consistent(runs)

    assert_effects_once(runs, effect_lines(clusters.effect_file), TURNS)
    attempts = Counter(Run.objects.filter(pk__in=ids).values_list("attempts", flat=True))
    if spends_attempts:
        assert max(attempts) < 3, (attempts, clusters.logs())
    else:
        # A dropped connection is not a crash: runs were handed back, not reclaimed.
        assert attempts == {0: RUNS}, (attempts, clusters.logs())
