"""PERF-5 on a real cluster: a committed wake-up is claimed at once by a worker listening
for it, not when q2's pusher next polls its queue or the heartbeat next looks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from agentruns.bench.workload import allow_as_shown
from agentruns.models import Note, Run, Ticket
from agentruns.services.resume import run_resume
from agentruns.store.wakeups import WAKE_CHANNEL
from tests.support.clusters import Clusters, configuration, running_clusters, wait_statuses
from tests.support.runs import bench_user, submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Far beyond what the test waits: only the listener can make the run start in time.
SLOW_POLL, SLOW_LEASE = 60, 120
WITHIN = 5.0


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def listeners() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s",
            [f"LISTEN {WAKE_CHANNEL}"],
        )
        return int(cursor.fetchone()[0])


def test_perf5_a_submission_and_an_approval_start_at_once_whatever_q2s_poll(clusters):
    config = configuration(
        "wake-latency",
        [
            {"tool_calls": [{"name": "notes.write", "arguments": {"title": "t", "body": "b"}}]},
            {"text": "written"},
        ],
        allowed=["notes"],
    )
    clusters.start("a", AGENTRUNS_Q_POLL=SLOW_POLL, AGENTRUNS_LEASE_SECONDS=SLOW_LEASE)
    clusters.wait(lambda: listeners() == 2, timeout=60, what="both workers to listen")
    (run,) = submit_batch(config)
    wait_statuses([run], "awaiting", timeout=WITHIN, clusters=clusters)
    ticket = Ticket.objects.get(run=run, status=Ticket.Status.ACTIVE)
    resumed = time.monotonic()
    run_resume(user=bench_user(), run_id=run.pk, command=allow_as_shown(ticket))
    clusters.wait(
        lambda: Note.objects.filter(run=run).exists(), timeout=WITHIN, what="the approved call"
    )
    assert time.monotonic() - resumed < WITHIN
    wait_statuses([run], "completed", timeout=WITHIN, clusters=clusters)
    assert Run.objects.get(pk=run.pk).epoch == 2  # claimed once per wake-up, never twice
