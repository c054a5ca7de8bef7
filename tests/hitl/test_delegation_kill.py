"""DEL-1 across a real SIGKILL: a worker process driving a child run is killed at each of
its commit points (read from the trace an uninterrupted child leaves), the run is recovered
as the sweeper would, and the tree ends as the uninterrupted one does: the child run once,
its result in the parent once."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.models import Event, Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import scripted_configuration
from tests.support.crash import expire_lease, read_trace, run_child
from tests.support.runs import submit

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DELEGATE = {"name": "agent.delegate", "arguments": {"configuration": "lookup", "task": "find"}}


def parked_tree(user) -> tuple[Run, Run]:
    parent = submit(user, "triage")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    return parent, Run.objects.get(parent=parent)


def test_a_child_worker_killed_at_each_commit_hands_back_once_DEL_1(staff, tmp_path):
    lookup = scripted_configuration("lookup", [{"text": "the owner is Ada"}])
    triage = scripted_configuration("triage", [{"tool_calls": [DELEGATE]}, {"text": "triaged"}])
    triage.delegates.set([lookup])
    _, probe = parked_tree(staff)
    trace = tmp_path / "trace"
    assert run_child(probe.pk, trace=trace).returncode == 0
    commits = [f"commit:{n}" for n in range(1, read_trace(trace).count("commit") + 1)]
    assert commits
    for point in commits:
        parent, child = parked_tree(staff)
        killed = run_child(child.pk, faults=point)
        assert killed.killed, (point, str(killed))
        if Run.objects.get(pk=child.pk).status == Run.Status.RUNNING:
            expire_lease(child.pk)
            assert execute_run(child.pk) == Run.Status.COMPLETED
        assert execute_run(parent.pk) == Run.Status.COMPLETED, point
        results = Event.objects.filter(run=parent, type=ev.TOOL_RESULT)
        assert [r.payload["content"] for r in results] == ["the owner is Ada"], point
        assert Run.objects.filter(parent=parent).count() == 1
        assert Run.objects.get(pk=parent.pk).final_reply == "triaged"
