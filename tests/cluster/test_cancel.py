"""HITL-11 on a real cluster: cancelling a queued, an awaiting and a running run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django_q.models import OrmQ

from agentruns import events as ev
from agentruns.errors import NotAwaiting
from agentruns.models import Run, Ticket
from agentruns.services.runs import run_cancel
from tests.conftest import grant
from tests.support.clusters import (
    Clusters,
    assert_log_consistent,
    configuration,
    events,
    running_clusters,
    wait_statuses,
)
from tests.support.hitl import client_for
from tests.support.runs import bench_user, submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def test_hitl11_cancel_queued_run_then_its_wakeup_is_harmless(clusters):
    config = configuration("cancel-queued", [{"text": "done"}])
    (run,) = submit_batch(config)
    run_cancel(user=bench_user(), run_id=run.pk)
    cancelled = events(run)
    assert [kind for _, kind, _ in cancelled][-1] == ev.RUN_CANCELLED
    clusters.start("a")
    clusters.wait(
        lambda: not OrmQ.objects.exists(), timeout=30, what="the stale wake-up to be taken"
    )
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED and run.epoch == 0
    assert events(run) == cancelled


def test_hitl11_cancel_awaiting_run_voids_ticket_and_resume_is_not_awaiting(clusters):
    from agentruns.bench.workload import allow_as_shown
    from agentruns.services.resume import run_resume

    config = configuration(
        "cancel-awaiting",
        [{"tool_calls": [{"name": "notes.write", "arguments": {"title": "t", "body": "b"}}]}],
        allowed=["notes"],
    )
    clusters.start("a")
    (run,) = submit_batch(config)
    wait_statuses([run], "awaiting", timeout=30, clusters=clusters)
    ticket = Ticket.objects.get(run=run, status=Ticket.Status.ACTIVE)
    run_cancel(user=bench_user(), run_id=run.pk)
    run.refresh_from_db()
    ticket.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert ticket.status == Ticket.Status.VOID
    command = allow_as_shown(ticket)
    with pytest.raises(NotAwaiting):
        run_resume(user=bench_user(), run_id=run.pk, command=command)
    assert_log_consistent([run])


def test_hitl11_cancel_running_run_stops_at_next_boundary_after_the_call_completes(
    clusters, tmp_path
):
    """The call in progress completes and its result is recorded; then the run ends
    `cancelled` instead of asking the model again. OPS-5: the cancel came through the API
    from an approver who did not start the run; the worker's `run.cancelled` and the audit
    export name them."""
    started, release = tmp_path / "c.started", tmp_path / "c.release"
    config = configuration(
        "cancel-running",
        [
            {
                "tool_calls": [
                    {
                        "name": "test.wait",
                        "arguments": {"started": str(started), "release": str(release)},
                    }
                ]
            },
            {"text": "the model should not have been asked again"},
        ],
    )
    clusters.start("a")
    (run,) = submit_batch(config)
    clusters.wait(started.exists, timeout=30, what="the wait tool to start")
    approver = grant(
        get_user_model().objects.create_user("night-shift", is_staff=True),
        "approve_run",
        "view_audit",
    )
    assert client_for(approver).post(f"/api/runs/{run.pk}/cancel/").status_code == 200
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.cancel_requested
    release.write_text("go")
    wait_statuses([run], "cancelled", timeout=30, clusters=clusters)
    kinds = [(kind, payload) for _, kind, payload in events(run)]
    assert [k for k, _ in kinds] == [ev.USER, ev.ASSISTANT, ev.TOOL_RESULT, ev.RUN_CANCELLED]
    result = kinds[2][1]
    assert result["tool"] == "test.wait" and result["status"] == ev.OK
    assert result["content"] == "released"
    assert kinds[3][1] == {"by": "night-shift"}
    response = client_for(approver).get(
        "/api/audit/", {"format": "jsonl", "kind": ev.RUN_CANCELLED}
    )
    records = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert [(r["run"], r["actor"]) for r in records] == [(run.pk, "night-shift")]
    assert_log_consistent([run])


def test_hitl11_cancel_landing_while_a_turns_calls_run_never_parks_the_run(clusters, tmp_path):
    """The turn's first call needs an approver and its second runs meanwhile; a cancel
    lands while the second runs. The run ends `cancelled` instead of parking: no ticket is
    ever opened, the call that ran keeps its result, the waiting one is interrupted."""
    started, release = tmp_path / "m.started", tmp_path / "m.release"
    config = configuration(
        "cancel-mixed",
        [
            {
                "tool_calls": [
                    {"name": "notes.write", "arguments": {"title": "t", "body": "b"}},
                    {
                        "name": "test.wait",
                        "arguments": {"started": str(started), "release": str(release)},
                    },
                ]
            },
            {"text": "the model should not have been asked again"},
        ],
        allowed=["test", "notes"],
    )
    clusters.start("a")
    (run,) = submit_batch(config)
    clusters.wait(started.exists, timeout=30, what="the wait tool to start")
    run_cancel(user=bench_user(), run_id=run.pk)
    release.write_text("go")

    wait_statuses([run], "cancelled", timeout=30, clusters=clusters)
    assert not Ticket.objects.filter(run=run).exists()
    results = {p["tool"]: p["status"] for _, kind, p in events(run) if kind == ev.TOOL_RESULT}
    assert results == {"test.wait": ev.OK, "notes.write": ev.ERROR}
    assert [kind for _, kind, _ in events(run)][-1] == ev.RUN_CANCELLED
    assert_log_consistent([run])
