"""SEC-3, LOOP-7: hostile model output through the fake provider (the official SDKs on a
real loopback server). Whatever the model sends — call ids reused from an earlier turn,
an empty message, a reply of 10 MB — the run gets a model-visible error result or fails
with a clear code; the history stays paired and the thread usable; nothing is stuck.
(Invalid JSON arguments, schema violations, unknown tools and duplicate ids inside one
turn: tests/loop/test_bad_input.py.)"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from agentruns import events as ev
from agentruns.models import Event, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit
from tests.support.catalog import make_anthropic_configuration
from tests.support.crash import make_openai_configuration, provider_pairing_problems, submit
from tests.support.deferred import fake_server, modes
from tests.support.fake_provider import FakeProvider
from tests.support.runs import prompt

pytestmark = pytest.mark.django_db

ECHO = {"id": "call_1", "name": "test_echo", "arguments": {"text": "one"}}
HUGE_CALL = {"id": "big", "name": "test_echo", "arguments": {"text": "y" * 10**7}}


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


@pytest.fixture
def openai_loop(fake):
    return make_openai_configuration("loop", fake, allowed_tools=["test.echo"])


@pytest.fixture
def anthropic_loop(fake):
    return make_anthropic_configuration("aloop", fake, allowed_tools=["test.echo"])


def follow_up(user, run: Run, configuration: str) -> Run:
    """The next prompt in the same thread: the hostile turn is in its history now."""
    later, created = run_submit(
        user=user,
        submission=Submission(configuration=configuration, input="and now?", thread=run.thread_id),
    )
    assert created
    return later


def test_loop7_call_ids_reused_from_an_earlier_turn_fail_the_run_before_anything_runs(
    staff, fake, openai_loop
):
    """LOOP-7: the second turn reuses the first turn's call id. Pairing that history is
    impossible, so the turn is never acted on: `corrupt_history`, its call not run, no
    further request, and the stored history still pairs."""
    fake.queue({"tool_calls": [ECHO]}, {"tool_calls": [{**ECHO, "arguments": {"text": "2"}}]})
    run = submit(staff, "loop")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "corrupt_history"
    assert "call_1" in run.failure["detail"]
    assert len(fake.requests) == 2
    assert ToolInvocation.objects.filter(run=run).count() == 1
    assert provider_pairing_problems(run.pk) == []


def test_loop7_call_ids_reused_from_an_earlier_run_of_the_thread_are_refused_too(
    staff, fake, openai_loop
):
    """LOOP-7 across runs: the ids live in the thread's history, not the run's."""
    fake.queue({"tool_calls": [ECHO]}, {"text": "done"})
    first = submit(staff, "loop")
    assert execute_run(first.pk) == Run.Status.COMPLETED
    fake.queue({"tool_calls": [ECHO]})
    second = follow_up(staff, first, "loop")

    assert execute_run(second.pk) == Run.Status.FAILED

    second.refresh_from_db()
    assert second.failure["code"] == "corrupt_history"
    assert provider_pairing_problems(second.pk) == []


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_sec3_an_empty_reply_ends_the_run_and_leaves_the_thread_usable(
    staff, fake, openai_loop, anthropic_loop, wire
):
    """SEC-3: a reply with no text and no tool call ends the run (an empty final reply);
    the thread's next prompt is still a history the real API accepts (an empty
    assistant message is one the Messages API rejects)."""
    slug = "loop" if wire == "openai" else "aloop"
    empty = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]}
    fake.queue(empty if wire == "openai" else {"text": ""}, {"text": "still here"})
    run = submit(staff, slug)

    assert execute_run(run.pk) in (Run.Status.COMPLETED, Run.Status.FAILED)
    run.refresh_from_db()
    if run.status == Run.Status.FAILED:
        assert run.failure["code"] == "provider_malformed_reply", run.failure
    later = follow_up(staff, run, slug)
    assert execute_run(later.pk) == Run.Status.COMPLETED, Run.objects.get(pk=later.pk).failure
    assert [r.path for r in fake.requests][-1].endswith(("completions", "messages"))


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param({"text": "x" * 10_000_000}, id="10MB-text"),
        pytest.param(
            {
                "tool_calls": [
                    {"id": "big", "name": "test_echo", "arguments": {"text": "y" * 10**7}}
                ]
            },
            id="10MB-arguments",
        ),
    ],
)
def test_sec3_a_10mb_reply_fails_the_run_before_it_is_stored(staff, fake, openai_loop, reply):
    """SEC-3: a reply over AGENTRUNS_MAX_REPLY_BYTES (a broken or hostile model: no real
    turn is that long) fails the run `provider_reply_too_large` at once. Nothing of it is
    stored, tokenised, run or sent on, and the thread stays paired."""
    fake.queue(reply, {"text": "must never be asked"})
    run = submit(staff, "loop")

    started = time.monotonic()
    assert execute_run(run.pk) == Run.Status.FAILED
    assert time.monotonic() - started < 15

    run.refresh_from_db()
    assert run.failure["code"] == "provider_reply_too_large", run.failure
    assert run.failure["limit"] == 1_000_000 and run.failure["size"] >= 10**7
    assert len(fake.requests) == 1
    assert not Event.objects.filter(run=run, type=ev.ASSISTANT).exists()
    assert not ToolInvocation.objects.filter(run=run).exists()
    assert max(len(str(e.payload)) for e in Event.objects.filter(run=run)) < 10_000
    assert provider_pairing_problems(run.pk) == []


def test_sec3_a_reply_just_under_the_limit_is_an_ordinary_turn(staff, fake, openai_loop, settings):
    settings.AGENTRUNS_MAX_REPLY_BYTES = 2_000
    fake.queue({"text": "z" * 1_900})
    run = submit(staff, "loop")

    assert execute_run(run.pk) == Run.Status.COMPLETED


# ---------------------------------------------------------------- on the wire


def drive_bounded(run: Run, seconds: float) -> str | None:
    """Drive the run on a thread; a run still going after `seconds` is stuck."""
    outcome: list[str | None] = []

    def drive() -> None:
        try:
            outcome.append(execute_run(run.pk))
        finally:
            connections.close_all()

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the run was still waiting on its provider after {seconds}s"
    return outcome[0]


@pytest.mark.parametrize(
    "transport",
    [
        pytest.param({"truncate": 40}, id="connection-closed-mid-body"),
        pytest.param({"cut": 40}, id="complete-reply-with-cut-json"),
        pytest.param({"reset": True}, id="connection-reset"),
    ],
)
@pytest.mark.django_db(transaction=True)
def test_sec3_a_truncated_or_dropped_reply_fails_the_run_with_a_clear_code(
    staff, fake, openai_loop, transport
):
    """SEC-3: a reply cut off on the wire (or a connection reset) is a failed provider
    call, never a half-recorded turn: `provider_error` (or `provider_malformed_reply` when
    the HTTP reply itself was complete), no assistant event, history paired."""
    fake.queue({"text": "a reply that will not arrive whole", "transport": transport})
    run = submit(staff, "loop")

    assert drive_bounded(run, 30) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] in ("provider_error", "provider_malformed_reply"), run.failure
    assert not Event.objects.filter(run=run, type=ev.ASSISTANT).exists()
    assert provider_pairing_problems(run.pk) == []


@pytest.mark.django_db(transaction=True)
def test_sec3_a_reply_that_never_ends_is_cut_off_by_the_provider_timeout(staff, fake):
    """SEC-3: the server sends its headers, then one byte every 0.2 s for ever: each read
    is well inside the 1 s timeout, so only a deadline on the whole call ends it. The run
    fails `provider_error` (retryable) within a bounded time."""
    make_openai_configuration(
        "trickled", fake, allowed_tools=["test.echo"], provider_kw={"timeout_seconds": 1}
    )
    fake.queue({"text": "never finished", "transport": {"trickle": 0.2}})
    run = submit(staff, "trickled")

    started = time.monotonic()
    assert drive_bounded(run, 20) == Run.Status.FAILED
    assert time.monotonic() - started < 10

    run.refresh_from_db()
    assert (run.failure["code"], run.failure["retryable"]) == ("provider_error", True)
    assert len(fake.requests) == 1


def test_sec3_def6_a_10mb_summary_fails_the_run_before_it_is_kept(staff):
    """SEC-3, DEF-6: the compaction summary is model output too: one of 10 MB fails the
    run `provider_reply_too_large`; no compaction event holds it, no turn is sent."""
    with fake_server(summary="s" * 10**7) as (fake, _script):
        make_openai_configuration(
            "cfg",
            fake,
            allowed_tools=["clock.now"],
            modes=modes(agent=(["clock.now"], [])),
            context_budget_tokens=300,
        )
        first = prompt(staff, "cfg", " ".join(["hello"] * 100))
        before = len(fake.requests)
        second = prompt(
            staff, "cfg", " ".join(["hello"] * 250), thread=first.thread_id, expect="failed"
        )
    assert (second.failure or {}).get("code") == "provider_reply_too_large"
    assert len(fake.requests) == before + 1  # the summary request only
    assert not Event.objects.filter(run=second, type=ev.COMPACTION).exists()
