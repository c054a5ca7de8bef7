"""DEL-1's concurrent siblings: every `agent.delegate` call of one turn starts its child at
once, the parent parks on a delegation ticket per call, and the last child to end wakes
it, exactly once, however the siblings' ends interleave across workers. Threads here are
workers with their own database connections, released together (never a mocked race)."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from django.db import connection
from django_q.models import OrmQ

from agentruns import events as ev
from agentruns.models import Event, GateAudit, Run, Ticket
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import run_cancel
from tests.support.catalog import make_openai_configuration, scripted_configuration
from tests.support.crash import crash_in_process, expire_lease, fault_hook, history
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import results_by_call, tool_messages
from tests.support.runs import submit

pytestmark = pytest.mark.django_db(transaction=True)


def delegate(configuration: str, task: str) -> dict[str, Any]:
    return {"name": "agent.delegate", "arguments": {"configuration": configuration, "task": task}}


def echo_task(body: dict[str, Any], path: str) -> dict[str, Any]:
    """A child's model answers its own task, so each result says which call it belongs to."""
    task = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
    return {"text": f"answer to {task}"}


def in_workers(*work: Any, timeout: float = 60) -> list[Any]:
    """Each callable on its own thread (a worker with its own connection), released by one
    barrier; what each returned, in the order given."""
    start = threading.Barrier(len(work))
    results: list[Any] = [None] * len(work)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait(timeout=timeout)
            results[i] = work[i]()
        except BaseException as exc:  # re-raised below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), "a worker is still running"
    if errors:
        raise errors[0]
    return results


def children_of(run: Run) -> list[Run]:
    return list(Run.objects.filter(parent=run).order_by("id"))


def parent_wakeups() -> int:
    """Queued wake-ups left once the children ran (a claim deletes its run's own row)."""
    return OrmQ.objects.count()


def test_two_delegations_of_a_turn_run_at_once_and_the_parent_reads_both_in_call_order_DEL_1(
    staff,
):
    """Two children, each with a provider that takes 1.5 s, driven by two workers: their
    running intervals (the gate's row before a send to the reply's event, both stamped by
    the database) overlap, the parent is woken once, and its next request carries both
    results in the order of its calls, not of their ends."""
    with FakeProvider() as brain, FakeProvider(latency=1.5, default=echo_task) as slow:
        lookup = make_openai_configuration("lookup", slow)
        search = make_openai_configuration("search", slow)
        triage = make_openai_configuration("triage", brain)
        triage.delegates.set([lookup, search])
        calls = [delegate("lookup", "find the owner"), delegate("search", "find the runbook")]
        brain.queue({"tool_calls": calls}, {"text": "triaged"})
        parent = submit(staff, "triage")
        assert execute_run(parent.pk) == Run.Status.AWAITING
        first, second = children_of(parent)
        tickets = Ticket.objects.filter(run=parent, status=Ticket.Status.ACTIVE).order_by("id")
        assert [(t.kind, t.child_id) for t in tickets] == [
            (Ticket.Kind.DELEGATION, first.pk),
            (Ticket.Kind.DELEGATION, second.pk),
        ]
        assert {first.status, second.status} == {Run.Status.QUEUED}
        call_ids = [first.parent_call_id, second.parent_call_id]

        # The second sibling is driven first: its result is logged first.
        ends = in_workers(lambda: execute_run(second.pk), lambda: execute_run(first.pk))
        assert ends == [Run.Status.COMPLETED, Run.Status.COMPLETED]

        spans = []
        for child in (first, second):
            sent = GateAudit.objects.filter(run_id=child.pk).order_by("created_at").first()
            reply = Event.objects.get(run_id=child.pk, type=ev.ASSISTANT)
            assert sent is not None
            spans.append((sent.created_at, reply.created_at))
        assert max(s for s, _ in spans) < min(e for _, e in spans), spans  # they overlapped

        assert Run.objects.get(pk=parent.pk).status == Run.Status.QUEUED
        assert parent_wakeups() == 1
        decided = Event.objects.filter(run=parent, type=ev.TICKET_DECIDED)
        assert sorted(d.payload["child"] for d in decided) == [first.pk, second.pk]
        assert execute_run(parent.pk) == Run.Status.COMPLETED
        assert len(brain.requests) == 2
        read = tool_messages(brain.requests[1].body)
        assert [(m["tool_call_id"], m["content"]) for m in read] == [
            (call_ids[0], "answer to find the owner"),
            (call_ids[1], "answer to find the runbook"),
        ]


def sibling_tree(parent_turns: list[dict[str, Any]] | None = None, **parent_kw: Any) -> None:
    lookup = scripted_configuration("lookup", [{"text": "the owner is Ada"}])
    search = scripted_configuration("search", [{"text": "the runbook is on the wiki"}])
    calls = [delegate("lookup", "find the owner"), delegate("search", "find the runbook")]
    triage = scripted_configuration(
        "triage", parent_turns or [{"tool_calls": calls}, {"text": "triaged"}], **parent_kw
    )
    triage.delegates.set([lookup, search])


def test_siblings_ending_at_the_same_instant_wake_their_parent_exactly_once_DEL_1(staff):
    """Both children's terminal transactions race for the parent; each takes the parent's
    row lock first, so the later sees the earlier's answer and only it wakes the parent
    (a second wake-up would fail its awaiting → queued move and undo that child's end)."""
    sibling_tree()
    for _ in range(4):
        OrmQ.objects.all().delete()
        parent = submit(staff, "triage")
        assert execute_run(parent.pk) == Run.Status.AWAITING
        ends = in_workers(*(partial(execute_run, child.pk) for child in children_of(parent)))
        assert ends == [Run.Status.COMPLETED, Run.Status.COMPLETED]
        assert Run.objects.get(pk=parent.pk).status == Run.Status.QUEUED
        assert parent_wakeups() == 1
        assert not Ticket.objects.filter(run=parent, status=Ticket.Status.ACTIVE).exists()
        assert execute_run(parent.pk) == Run.Status.COMPLETED
        contents = [r["content"] for r in results_by_call(parent.pk).values()]
        assert sorted(contents) == ["the owner is Ada", "the runbook is on the wiki"]


def test_a_parent_waits_until_its_last_sibling_has_ended_DEL_1(staff):
    sibling_tree()
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    first, second = children_of(parent)
    assert execute_run(first.pk) == Run.Status.COMPLETED
    assert Run.objects.get(pk=parent.pk).status == Run.Status.AWAITING
    assert [t.child_id for t in Ticket.objects.filter(run=parent, status="active")] == [second.pk]
    assert list(results_by_call(parent.pk)) == [first.parent_call_id]  # logged as it ended
    assert execute_run(second.pk) == Run.Status.COMPLETED
    assert Run.objects.get(pk=parent.pk).status == Run.Status.QUEUED


def test_siblings_share_what_is_left_of_the_trees_tool_calls_DEL_3(staff):
    """The root allows 5 calls; its two delegations spend 2, so the 3 left are split 2 and
    1: together the siblings can never spend more than their tree has."""
    sibling_tree(max_tool_calls=5)
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    budgets = [
        Event.objects.get(run=child, type=ev.RUN_DELEGATED).payload["tool_call_budget"]
        for child in children_of(parent)
    ]
    assert budgets == [2, 1]


def test_cancelling_a_parent_cancels_every_sibling_and_voids_each_ticket_DEL_4(staff):
    sibling_tree()
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    run_cancel(user=staff, run_id=parent.pk)
    assert {c.status for c in children_of(parent)} == {Run.Status.CANCELLED}
    statuses = set(Ticket.objects.filter(run=parent).values_list("status", flat=True))
    assert statuses == {Ticket.Status.VOID}
    assert Run.objects.get(pk=parent.pk).status == Run.Status.CANCELLED


def test_a_refused_sibling_is_an_error_result_and_the_others_still_start_DEL_1(staff):
    calls = [delegate("elsewhere", "x"), delegate("search", "find the runbook")]
    sibling_tree([{"tool_calls": calls}, {"text": "triaged"}])
    parent = submit(staff, "triage")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    (child,) = children_of(parent)
    (refused,) = results_by_call(parent.pk).values()
    assert refused["status"] == ev.ERROR and "not one of this configuration's" in refused["content"]
    assert execute_run(child.pk) == Run.Status.COMPLETED
    assert execute_run(parent.pk) == Run.Status.COMPLETED


# ---------------------------------------------------------------- crashes of any run


def drive(run_id: int, crash: str | None, expected: str) -> None:
    """The run to `expected`; with `crash`, its first drive is killed there and the run
    recovered as the sweeper would."""
    if crash:
        try:
            crash_in_process(run_id, crash)
        except AssertionError:
            pass  # this drive ends before the point: nothing to kill here
        else:
            if Run.objects.get(pk=run_id).status == Run.Status.RUNNING:
                expire_lease(run_id)
    if Run.objects.get(pk=run_id).status in (Run.Status.QUEUED, Run.Status.RUNNING):
        assert execute_run(run_id) == expected


def drive_siblings(user: Any, who: str = "", point: str = "") -> Run:
    """Parent, first child, second child, parent; `who` ("parent", "first", "second") is
    killed at `point` in each of its drives."""
    parent = submit(user, "triage")
    drive(parent.pk, point if who == "parent" else None, Run.Status.AWAITING)
    first, second = children_of(parent)
    drive(first.pk, point if who == "first" else None, Run.Status.COMPLETED)
    drive(second.pk, point if who == "second" else None, Run.Status.COMPLETED)
    drive(parent.pk, point if who == "parent" else None, Run.Status.COMPLETED)
    return parent


IDS = ("correlation_id", "child")


def comparable(run_id: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (kind, {key: value for key, value in payload.items() if key not in IDS})
        for kind, payload in history(run_id)
    ]


def test_a_kill_at_every_commit_of_any_run_of_the_tree_hands_each_result_back_once_DEL_1(staff):
    """REC-1 with DEL-1's siblings: killed at each commit of the parent's or either
    child's drives, the tree ends as the uninterrupted one does, each child run once and
    each result in the parent once."""
    sibling_tree()
    with fault_hook(lambda name, count: None) as points:
        baseline = drive_siblings(staff)
    expected = comparable(baseline.pk)
    commits = sorted({p for p in points if p.startswith(faults.COMMIT)})
    assert len(commits) >= 3
    for who in ("parent", "first", "second"):
        for point in commits:
            parent = drive_siblings(staff, who, point)
            assert comparable(parent.pk) == expected, (who, point)
            assert len(children_of(parent)) == 2, (who, point)
            results = Event.objects.filter(run=parent, type=ev.TOOL_RESULT)
            assert len(results) == 2, (who, point)
