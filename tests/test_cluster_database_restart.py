"""CLU-2, CLU-3, TOOL-4 on a real cluster while the database drops every connection.

A PostgreSQL restart, seen from the workers, is every connection dying at once and new
ones being accepted again. The shared test server cannot be restarted under the other
suites, so this terminates every backend of the test database except the test's own
(`pg_terminate_backend`), three times while runs execute: the workers' pooled
connections, their heartbeats' and q2's own all break mid-statement. Workers reconnect,
every run completes, and no tool effect happens twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from agentruns import events as ev
from agentruns.models import Event, Run
from tests.support.clusters import (
    Clusters,
    assert_log_consistent,
    configuration,
    effect_lines,
    events,
    running_clusters,
    submit_batch,
    wait_statuses,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNS = 24
TURNS = 4


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


def write_turn(n: int) -> dict:
    return {
        "tool_calls": [
            {"name": "test.external_write", "arguments": {"value": f"w{n}"}},
            {"name": "clock.now", "arguments": {}},
        ]
    }


def test_clu_runs_survive_the_database_dropping_every_connection_mid_flight(clusters):
    """CLU-2, CLU-3, TOOL-4: 24 runs of four tool turns each (an external write and a
    read per turn) on a two-worker cluster; every connection of the test database is
    terminated three times while they run. Every run completes, each log is consistent
    (no step written twice, every call paired), every external effect happened at most
    once, and every `ok` write exactly once. A dropped connection is database trouble,
    not a dead worker: the runs it interrupted are handed back without spending an
    attempt."""
    config = configuration(
        "db-drop",
        [*(write_turn(n) for n in range(TURNS)), {"text": "done"}],
        latency_ms=150,
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
        dropped.append(drop_every_other_connection())
    assert all(n > 0 for n in dropped), dropped

    wait_statuses(runs, "completed", timeout=120, clusters=clusters)
    assert clusters.started[0].alive()
    assert_log_consistent(runs)

    lines = effect_lines(clusters.effect_file)
    assert len(lines) == len(set(lines)), Counter(lines).most_common(3)
    for run in runs:
        results = [p for _, kind, p in events(run) if kind == ev.TOOL_RESULT]
        writes = [r for r in results if r["tool"] == "test.external_write"]
        assert len(writes) == TURNS, (run.pk, writes)
        for result in writes:
            mine = [line for line in lines if line.startswith(f"{run.pk}:{result['call_id']}:")]
            if result["status"] == ev.OK:
                assert len(mine) == 1, (run.pk, result, mine)
            else:
                assert result["status"] == ev.UNCERTAIN and len(mine) <= 1, (run.pk, result)
    # A dropped connection is not a crash: runs were handed back, not reclaimed (CLU-3).
    attempts = Counter(Run.objects.filter(pk__in=ids).values_list("attempts", flat=True))
    assert attempts == {0: RUNS}, (attempts, clusters.logs())
