"""SCHED-1 and SCHED-3 on real clusters: two `qcluster` processes (each sweeping on its
heartbeat) and this test's own sweeper race over the same due firings; a timer run waits
holding nothing and ends by itself."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from agentruns.models import Run, Schedule, ScheduleFiring
from agentruns.services.schedules import schedules_fire_due
from tests.support.clusters import Clusters, configuration, running_clusters, wait_statuses
from tests.support.runs import bench_user, submit

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def test_sched1_two_clusters_and_a_sweeper_start_exactly_10_runs_for_10_due_firings(clusters):
    config = configuration("scheduled", [{"text": "report written"}])
    owner = bench_user()
    for i in range(10):
        Schedule.objects.create(
            name=f"s{i}", configuration=config, input="report", owner=owner, interval_seconds=3600
        )
    clusters.start("a")
    clusters.start("b")
    # Every due time at once, while both clusters sweep on their heartbeats.
    Schedule.objects.update(next_run_at=timezone.now() - timedelta(seconds=2))
    schedules_fire_due()
    clusters.wait(
        lambda: Run.objects.filter(status=Run.Status.COMPLETED).count() >= 10,
        timeout=60,
        what="ten scheduled runs to complete",
    )
    assert Run.objects.count() == 10
    started = ScheduleFiring.objects.filter(outcome=ScheduleFiring.Outcome.STARTED)
    assert started.count() == 10
    assert started.values("schedule").distinct().count() == 10
    assert not ScheduleFiring.objects.filter(outcome=ScheduleFiring.Outcome.SKIPPED).exists()
    assert all(run.trigger["kind"] == "schedule" for run in Run.objects.all())


def test_sched3_a_timer_run_holds_nothing_while_it_waits_and_ends_by_itself(clusters):
    turns = [
        {"tool_calls": [{"id": "nap", "name": "agent.wait", "arguments": {"seconds": 2}}]},
        {"text": "woke up"},
    ]
    configuration("napper", turns, allowed=("agent",))
    clusters.start("a")
    run = submit(bench_user(), "napper")
    wait_statuses([run], "awaiting", timeout=30, clusters=clusters)
    parked = Run.objects.get(pk=run.pk)
    assert parked.lease_owner == "" and parked.lease_expires_at is None
    wait_statuses([run], "completed", timeout=30, clusters=clusters)
    assert Run.objects.get(pk=run.pk).final_reply == "woke up"
