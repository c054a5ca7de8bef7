"""REC-5, LOOP-8, LOOP-9 (seed 002, ADR-0166 and its budget amendment): checkpoints are an
optimisation only. Stopping the two-tool run at every restore point, deleting any suffix of
its checkpoints — or all of them — and resuming reaches the same terminal state and the same
history, every tool executed once; with LOOP-6's budget fitting in play, a refused call
never runs from any restore point.

The stops are in-process (`crash_in_process`: the executor dies at a fault point, which
always sits outside any transaction, so the database is left as SIGKILL leaves it); one
case goes through a real child process and SIGKILL for good measure.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentruns import events as ev
from agentruns.models import Checkpoint, Note, Run, ToolInvocation
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_configuration
from tests.support.crash import (
    EXTERNAL_CALL,
    FINAL_TEXT,
    NOTE_CALL,
    TWO_TOOLS,
    comparable_history,
    crash_in_process,
    crash_when,
    effect_lines,
    expected_history,
    expire_lease,
    history,
    make_openai_configuration,
    note_written,
    point_where,
    provider_pairing_problems,
    record_baseline,
    run_child,
    run_events,
    submit,
    turns_committed,
    two_tool_configuration,
    two_tool_reply,
    uncertain_write,
)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake():
    with FakeProvider(default=two_tool_reply) as server:
        yield server


def lose_newest_checkpoints(run: Run, lost: int) -> None:
    newest = Checkpoint.objects.filter(run=run).order_by("-id").values_list("pk", flat=True)
    Checkpoint.objects.filter(pk__in=list(newest[:lost])).delete()


@dataclass(frozen=True)
class Stopped:
    """A run stopped at a restore point, with what it looked like when it stopped."""

    run: Run
    point: str
    uncertain: bool
    lines: int  # effect lines when it stopped
    requests: int  # model requests before it started


def every_restore_point(
    user: Any,
    fake: FakeProvider,
    effects: Path,
    configuration: str,
    points: list[str],
    check: Callable[[Stopped], None],
) -> tuple[list[str], dict[str, str]]:
    """For every fault point of the uninterrupted run: stop a fresh run there, delete its
    newest 1..all checkpoints (one fresh run per count), resume it, and `check` it.
    Returns the cases tried and the failures, by case."""
    tried: list[str] = []
    failures: dict[str, str] = {}
    for point in points:
        run: Run | None = None
        held: int | None = None
        lost = 0
        while True:
            if run is None:
                requests = len(fake.requests)
                run = submit(user, configuration)
                crash_in_process(run.pk, point)
            if held is None:
                held = Checkpoint.objects.filter(run=run).count()
                lost = held  # all of them first, then every shorter suffix
            case = f"{point} lose {lost} of {held}"
            tried.append(case)
            stopped = Stopped(
                run,
                point,
                uncertain_write(run.pk, EXTERNAL_CALL["id"]),
                len(effect_lines(effects, run.pk)),
                requests,
            )
            try:
                lose_newest_checkpoints(run, lost)
                assert Checkpoint.objects.filter(run=run).count() == held - lost
                run.refresh_from_db()
                if run.status == Run.Status.RUNNING:
                    expire_lease(run.pk)
                    assert execute_run(run.pk) == Run.Status.COMPLETED
                else:
                    assert execute_run(run.pk) is None  # it had already ended
                check(stopped)
            except AssertionError as failure:
                failures[case] = str(failure).splitlines()[0]
            run = None
            lost -= 1
            if lost < 1:
                break
    return tried, failures


def test_checkpoints_are_taken_at_the_loop8_boundaries(staff, fake, effects):
    """LOOP-8: model response, tool batch pending, each tool completed, terminal; each
    records the last sequence it covers and the budget state, never the history."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    assert execute_run(run.pk) == Run.Status.COMPLETED

    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("id"))
    assert [c.kind for c in checkpoints] == [
        "model_response",
        "tool_pending",
        "tool_completed",
        "tool_completed",
        "terminal",
    ]
    sequences = [c.last_sequence for c in checkpoints]
    assert sequences == sorted(sequences)
    assert sequences[-1] == max(e.sequence for e in run_events(run.pk))
    pending = checkpoints[1].state
    assert pending["tool_calls_used"] == 2
    assert pending["turn"]["before"] == 0
    assert pending["turn"]["granted"] == [NOTE_CALL["id"], EXTERNAL_CALL["id"]]
    assert "messages" not in json.dumps(pending)


def test_read_only_results_committed_together_take_one_tool_completed_checkpoint(staff):
    """LOOP-8: the results of a turn's read-only calls are held and commit in one write;
    no restore could start between them, so that write takes one `tool_completed`
    checkpoint, covering every result."""
    echo = [{"name": "test.echo", "arguments": {"text": t}} for t in ("a", "b", "c")]
    make_configuration(
        "three-reads",
        model="scripted-model",
        allowed_tools=["test.echo"],
        script={"turns": [{"tool_calls": echo}, {"text": "done"}]},
    )
    run = submit(staff, "three-reads", "read")
    assert execute_run(run.pk) == Run.Status.COMPLETED

    checkpoints = list(Checkpoint.objects.filter(run=run).order_by("id"))
    kinds = [c.kind for c in checkpoints]
    assert kinds == ["model_response", "tool_pending", "tool_completed", "terminal"]
    results = [e.sequence for e in run_events(run.pk) if e.type == ev.TOOL_RESULT]
    completed = checkpoints[2]
    assert len(results) == 3 and completed.last_sequence == max(results)
    assert sorted(completed.state["turn"]["results"].values()) == ["ok", "ok", "ok"]


def test_lost_checkpoints_cost_time_not_information(staff, fake, effects):
    """REC-5 at every restore point of the two-tool run, with 1..all of its checkpoints
    lost: the same terminal state and history, every tool executed once (TOOL-4's
    uncertain write, whose watermark was set when the worker stopped, is never re-run)."""
    two_tool_configuration(fake)
    baseline = record_baseline(staff, fake, "two-tool")

    def check(stopped: Stopped) -> None:
        run = stopped.run
        run.refresh_from_db()
        assert (run.status, run.final_reply) == (Run.Status.COMPLETED, FINAL_TEXT)
        uncertain = EXTERNAL_CALL["id"] if stopped.uncertain else None
        assert comparable_history(run.pk) == expected_history(baseline, uncertain)
        results = Counter(p["call_id"] for kind, p in history(run.pk) if kind == ev.TOOL_RESULT)
        assert results == {NOTE_CALL["id"]: 1, EXTERNAL_CALL["id"]: 1}
        assert Note.objects.filter(run=run).count() == 1
        lines = len(effect_lines(effects, run.pk))
        assert lines == (stopped.lines if stopped.uncertain else 1)
        assert ToolInvocation.objects.filter(run=run).count() == 2
        # REC-4: committed turns are never asked for again; only a reply lost inside the
        # provider call costs one more request.
        extra = 1 if stopped.point.startswith(faults.PROVIDER) else 0
        assert len(fake.requests) - stopped.requests == baseline.model_requests + extra
        assert run.tool_calls_used == 2
        assert provider_pairing_problems(run.pk) == []

    tried, failures = every_restore_point(staff, fake, effects, "two-tool", baseline.points, check)
    assert len(tried) >= 15
    assert failures == {}, f"restore cases that did not recover, of {tried}"


def test_a_refused_call_never_runs_from_any_restore_point(staff, fake, effects):
    """REC-5 + LOOP-6 (seed 002 amendment): max_tool_calls=1 and a two-call turn; the
    budget refuses the external write. From every restore point, with any suffix of the
    checkpoints lost, the resumed run never executes it and never counts it."""
    two_tool_configuration(fake, max_tool_calls=1)
    baseline = record_baseline(staff, fake, "two-tool")
    refused = [
        p["call_id"]
        for kind, p in baseline.history
        if kind == ev.TOOL_RESULT and p["status"] == ev.REFUSED
    ]
    assert refused == [EXTERNAL_CALL["id"]]

    def check(stopped: Stopped) -> None:
        run = stopped.run
        run.refresh_from_db()
        assert run.status == Run.Status.COMPLETED
        assert history(run.pk) == baseline.history
        assert effect_lines(effects, run.pk) == []
        assert not ToolInvocation.objects.filter(run=run, call_id=EXTERNAL_CALL["id"]).exists()
        statuses = sorted(
            (p["call_id"], p["status"]) for kind, p in history(run.pk) if kind == ev.TOOL_RESULT
        )
        assert statuses == [(EXTERNAL_CALL["id"], ev.REFUSED), (NOTE_CALL["id"], ev.OK)]
        assert Note.objects.filter(run=run).count() == 1
        assert run.tool_calls_used == 1
        assert provider_pairing_problems(run.pk) == []

    tried, failures = every_restore_point(staff, fake, effects, "two-tool", baseline.points, check)
    assert len(tried) >= 8
    assert failures == {}, f"restore cases that ran or counted the refused call, of {tried}"


# --- REC-3: a turn the surviving checkpoint never saw supersedes its batch --------------

ECHO_CALL = {"id": "call_echo", "name": "test_echo", "arguments": {"text": "first"}}


def three_turn_reply(body: dict[str, Any], path: str) -> dict[str, Any]:
    """Turn one: one read-only call; turn two: the two-tool turn; then the answer."""
    turns = sum(1 for m in body.get("messages") or () if m.get("role") == "assistant")
    if turns == 0:
        return {"tool_calls": [ECHO_CALL]}
    if turns == 1:
        return {"tool_calls": [NOTE_CALL, EXTERNAL_CALL]}
    return {"text": FINAL_TEXT}


@pytest.mark.parametrize("max_tool_calls", [3, 2])
def test_an_adopted_newer_turn_is_dispatched_once_and_fitted_to_its_own_budget(
    staff, effects, max_tool_calls
):
    """REC-3: the run stops right after turn two committed and loses that turn's
    checkpoints; the surviving one is turn one's. The adopted turn's calls run once each,
    at their own step, fitted to the budget they were proposed under (a budget of 2 leaves
    one call for turn two: the external write stays refused)."""
    with FakeProvider(default=three_turn_reply) as fake:
        make_openai_configuration(
            "three",
            fake,
            allowed_tools=[*TWO_TOOLS, "test.echo"],
            approval_exempt_tools=TWO_TOOLS,
            max_tool_calls=max_tool_calls,
        )
        baseline = submit(staff, "three")
        assert execute_run(baseline.pk) == Run.Status.COMPLETED
        expected = history(baseline.pk)

        run = submit(staff, "three")
        crash_when(run.pk, turns_committed(run.pk, 2))  # right after turn two committed
        newest = Checkpoint.objects.filter(run=run).order_by("-id")
        assert [c.kind for c in newest[:2]] == ["tool_pending", "model_response"]
        Checkpoint.objects.filter(pk__in=[c.pk for c in newest[:2]]).delete()
        assert Checkpoint.objects.filter(run=run).order_by("-id")[0].state["turn"]["step"] == 0
        requests = len(fake.requests)
        expire_lease(run.pk)
        assert execute_run(run.pk) == Run.Status.COMPLETED
        assert len(fake.requests) - requests == 1  # only the final turn is asked for

    run.refresh_from_db()
    assert history(run.pk) == expected
    external_ran = max_tool_calls >= 3
    assert len(effect_lines(effects, run.pk)) == int(external_ran)
    assert Note.objects.filter(run=run).count() == 1
    turns = dict(ToolInvocation.objects.filter(run=run).values_list("call_id", "turn_index"))
    assert turns == {
        ECHO_CALL["id"]: 0,
        NOTE_CALL["id"]: 1,
        **({EXTERNAL_CALL["id"]: 1} if external_ran else {}),
    }
    assert run.tool_calls_used == min(3, max_tool_calls)
    assert provider_pairing_problems(run.pk) == []


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_with_every_checkpoint_lost_resumes_in_another_process(
    staff, fake, effects
):
    """REC-5 across real processes: SIGKILL after the note committed, delete every
    checkpoint, resume in a second child: the log alone is enough."""
    two_tool_configuration(fake)
    baseline = record_baseline(staff, fake, "two-tool")
    point = point_where(staff, "two-tool", note_written)
    run = submit(staff, "two-tool")
    before = len(fake.requests)

    first = run_child(run.pk, faults=point, effect_file=effects)
    assert first.killed, str(first)
    assert Checkpoint.objects.filter(run=run).delete()[0] == 3
    expire_lease(run.pk)
    second = run_child(run.pk, effect_file=effects)
    assert second.returncode == 0 and "outcome=completed" in second.stdout, str(second)

    assert history(run.pk) == baseline.history
    assert Note.objects.filter(run=run).count() == 1
    assert len(effect_lines(effects, run.pk)) == 1
    assert len(fake.requests) - before == baseline.model_requests


# --- LOOP-9: a checkpoint references the log, it never copies it ------------------------


def checkpoint_sizes(user, slug: str, turns: int) -> list[int]:
    script = [
        {"tool_calls": [{"name": "test.echo", "arguments": {"text": "same every turn"}}]}
    ] * turns
    make_configuration(
        slug,
        model="scripted-model",
        allowed_tools=["test.echo"],
        max_tool_calls=turns,
        script={"turns": [*script, {"text": "done"}]},
    )
    run = submit(user, slug, "loop")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    states = Checkpoint.objects.filter(run=run).values_list("state", flat=True)
    return [len(json.dumps(state)) for state in states]


def test_checkpoints_never_copy_the_history(staff):
    """LOOP-9: the size of a checkpoint does not grow with the number of turns, and the
    number of checkpoints grows linearly with them."""
    short = checkpoint_sizes(staff, "short", 3)
    long = checkpoint_sizes(staff, "long", 30)

    # Only the digits of sequence numbers and counters may grow.
    assert max(long) <= max(short) + 16
    assert (len(long) - 1) / 30 == (len(short) - 1) / 3
