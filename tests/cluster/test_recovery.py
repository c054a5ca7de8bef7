"""CLU-1..CLU-3, TOOL-4 on a real cluster: `manage.py qcluster` processes against the test
database; workers die (SIGKILL), stall (SIGSTOP) and come back, wake-ups get lost; every
run still reaches its one correct end, and no effect happens twice."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from django_q.models import OrmQ

from agentruns import events as ev
from agentruns.models import Run, Ticket
from tests.support.clusters import (
    Clusters,
    assert_log_consistent,
    configuration,
    effect_lines,
    events,
    running_clusters,
    wait_statuses,
)
from tests.support.runs import submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def wait_turn(tmp_path: Path, name: str) -> dict:
    started, release = tmp_path / f"{name}.started", tmp_path / f"{name}.release"
    return {
        "tool_calls": [
            {"name": "test.wait", "arguments": {"started": str(started), "release": str(release)}}
        ]
    }


def started_pid(path: Path, other_than: int | None = None) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit() or int(text) == other_than:
        return None
    return int(text)


def test_clu_runs_survive_a_cluster_killed_mid_flight(clusters, tmp_path):
    """CLU-2, CLU-3, TOOL-4: 30 runs over two clusters; one cluster is SIGKILLed (its whole
    process group) while it holds runs, then restarted. Every run ends as it should, no
    call has two results, no external effect happened twice, and the runs the dead cluster
    held were reclaimed (spending an attempt)."""
    writer = configuration(
        "clu-writer",
        [
            {
                "tool_calls": [
                    {"name": "test.external_write", "arguments": {"value": "first"}},
                    {"name": "test.echo", "arguments": {"text": "hello"}},
                ]
            },
            {"tool_calls": [{"name": "test.external_write", "arguments": {"value": "second"}}]},
            {"text": "done"},
        ],
        latency_ms=400,
        exempt=["test.external_write"],
    )
    parker = configuration(
        "clu-parker",
        [
            {"tool_calls": [{"name": "test.echo", "arguments": {"text": "x"}}]},
            {"tool_calls": [{"name": "notes.write", "arguments": {"title": "t", "body": "b"}}]},
        ],
        latency_ms=400,
        allowed=["test", "notes"],
    )
    # Cluster b starts only once a holds runs: started together, the one that warms up
    # first can take every run before the other claims any.
    a = clusters.start("a")
    runs = submit_batch(writer, 25) + submit_batch(parker, 5)
    expected = {run.pk: "completed" for run in runs[:25]} | {
        run.pk: "awaiting" for run in runs[25:]
    }

    a_pids: set[str] = set()

    def a_holds_runs() -> list[int]:
        a_pids.update(str(pid) for pid in a.pids())
        running = Run.objects.filter(status=Run.Status.RUNNING).values_list("pk", "lease_owner")
        return [
            pk for pk, owner in running if owner.count(":") == 2 and owner.split(":")[1] in a_pids
        ]

    clusters.wait(a_holds_runs, timeout=30, what="cluster a to hold runs")
    b = clusters.start("b")
    a.kill()
    held = a_holds_runs()  # still running under a dead cluster's leases: crash victims
    assert held
    a2 = clusters.start("a2")

    wait_statuses(runs, expected, timeout=60, clusters=clusters)
    assert a2.alive() and b.alive()
    assert_log_consistent(runs)

    # TOOL-4: no external effect twice; every ok result has its one effect line.
    lines = effect_lines(clusters.effect_file)
    assert len(lines) == len(set(lines)), Counter(lines).most_common(3)
    for run in runs[:25]:
        results = [p for _, kind, p in events(run) if kind == ev.TOOL_RESULT]
        for result in results:
            if result["tool"] != "test.external_write":
                continue
            mine = [line for line in lines if line.startswith(f"{run.pk}:{result['call_id']}:")]
            if result["status"] == ev.OK:
                assert len(mine) == 1, (run.pk, result, mine)
            else:
                assert result["status"] == ev.UNCERTAIN and len(mine) <= 1, (run.pk, result)
    for run in runs[25:]:
        assert Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).count() == 1

    # The runs the dead cluster held were crash reclaims: one attempt spent each.
    reclaimed = Run.objects.filter(pk__in=held)
    assert all(run.attempts >= 1 for run in reclaimed), [(r.pk, r.attempts) for r in reclaimed]


def test_clu_paused_worker_loses_its_lease_and_writes_nothing(clusters, tmp_path):
    """CLU-2: a worker process stopped (SIGSTOP) past its lease loses the run; another
    worker takes it over and finishes it; the stopped one, continued (SIGCONT), is fenced
    and writes nothing."""
    config = configuration("clu-pause", [wait_turn(tmp_path, "w"), {"text": "done"}])
    started, release = tmp_path / "w.started", tmp_path / "w.release"
    a = clusters.start("a")
    (run,) = submit_batch(config)
    paused = clusters.wait(lambda: started_pid(started), timeout=30, what="the wait tool to start")
    assert paused is not None
    epoch = Run.objects.get(pk=run.pk).epoch
    os.kill(paused, signal.SIGSTOP)
    try:
        clusters.start("b")
        clusters.wait(
            lambda: Run.objects.get(pk=run.pk).epoch > epoch,
            timeout=30,
            what="another worker to reclaim the run",
        )
        clusters.wait(
            lambda: started_pid(started, other_than=paused), timeout=30, what="a new wait"
        )
        release.write_text("go")
        wait_statuses([run], "completed", timeout=30, clusters=clusters)
        finished = events(run)
    finally:
        os.kill(paused, signal.SIGCONT)
    clusters.wait(
        lambda: f"run {run.pk}: lease taken over; stopped without writing" in a.log(),
        timeout=30,
        what="the continued worker to notice it was fenced",
    )
    assert events(run) == finished
    assert_log_consistent([run])
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED and run.attempts == 1


def test_clu_runs_whose_wakeups_were_lost_still_run(clusters, tmp_path):
    """CLU-1, CLU-3: queued runs whose wake-ups vanished from the queue still run: a
    worker's heartbeat claims them from the database (or the sweeper, comparing OrmQ with
    `Run.wake_queue_id`, re-enqueues them), and no attempt is spent."""
    config = configuration(
        "clu-lost", [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}, {"text": "done"}]
    )
    runs = submit_batch(config, 6)
    OrmQ.objects.all().delete()
    clusters.start("a")
    wait_statuses(runs, "completed", timeout=30, clusters=clusters)
    assert_log_consistent(runs)
    assert all(run.attempts == 0 for run in Run.objects.filter(pk__in=[r.pk for r in runs]))


def test_clu_attempts_exhausted_when_workers_keep_dying(clusters, tmp_path):
    """CLU-3: only crash reclaims spend attempts; a run whose worker dies more often than
    its budget allows ends `failed` with `attempts_exhausted`. Each time, the machine
    running it dies (its cluster's process group is SIGKILLed) and a new one starts."""
    config = configuration("clu-doomed", [wait_turn(tmp_path, "d"), {"text": "done"}])
    started = tmp_path / "d.started"
    cluster = clusters.start("a", AGENTRUNS_MAX_ATTEMPTS=1)
    (run,) = submit_batch(config)
    killed: int | None = None
    for crash in range(2):  # the first execution and one reclaim; the second gives up
        pid = clusters.wait(
            partial(started_pid, started, other_than=killed),
            timeout=30,
            what="the wait tool to (re)start",
        )
        assert pid is not None and pid in cluster.pids()
        cluster.kill()
        killed = pid
        cluster = clusters.start(f"after-crash-{crash}", AGENTRUNS_MAX_ATTEMPTS=1)
    wait_statuses([run], "failed", timeout=30, clusters=clusters)
    run.refresh_from_db()
    assert (run.failure or {}).get("code") == "attempts_exhausted"
    assert run.attempts == 2
    assert_log_consistent([run])
    kinds = [kind for _, kind, _ in events(run)]
    assert kinds[-1] == ev.RUN_FAILED


def test_clu_graceful_stop_hands_runs_back_without_spending_attempts(clusters, tmp_path):
    """A stopping worker (SIGTERM to the cluster) releases its runs at the next step
    boundary: back to queued with a wake-up, no attempt spent; another cluster ends them."""
    config = configuration(
        "clu-handover",
        [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}] * 3 + [{"text": "done"}],
        latency_ms=700,
    )
    a = clusters.start("a")
    runs = submit_batch(config, 8)
    clusters.wait(
        lambda: Run.objects.filter(pk__in=[r.pk for r in runs], status="running").count() == 8,
        timeout=30,
        what="cluster a to run all",
    )
    a.popen.send_signal(signal.SIGTERM)
    a.popen.wait(timeout=30)
    assert a.popen.returncode is not None
    released = Run.objects.filter(pk__in=[r.pk for r in runs], status=Run.Status.QUEUED).count()
    assert released == 8
    clusters.start("b")
    wait_statuses(runs, "completed", timeout=40, clusters=clusters)
    assert_log_consistent(runs)
    assert [r.attempts for r in Run.objects.filter(pk__in=[r.pk for r in runs])] == [0] * 8
