"""CLU-2, TOOL-3, TOOL-4: a worker whose lease was taken over (its epoch moved on) cannot
write anything — no event, no note, no external effect — and every invocation's
idempotency key is a function of what the call is, never of which attempt runs it."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_save
from django.utils import timezone

from agentruns import events as ev
from agentruns.models import Event, Note, Run, ToolInvocation
from agentruns.runtime.effects import idempotency_key
from agentruns.runtime.loop import Executor, Outcome, execute_run
from agentruns.runtime.state import ProposedCall
from agentruns.store.transitions import claim
from agentruns.tools.registry import REGISTRY
from tests.support.crash import (
    EXTERNAL_CALL,
    NOTE_CALL,
    SimulatedCrash,
    effect_lines,
    expire_lease,
    fault_hook,
    history,
    submit,
    two_tool_configuration,
    two_tool_reply,
)
from tests.support.fake_provider import FakeProvider

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake():
    with FakeProvider(default=two_tool_reply) as server:
        yield server


def taken_over(run_id: int):
    """Two leases on one run: the first worker's, then a second claim after it expired."""
    if Run.objects.get(pk=run_id).status == Run.Status.RUNNING:
        expire_lease(run_id)  # a crashed first attempt
    old = claim(run_id, owner="old-worker")
    assert old is not None
    expire_lease(run_id)
    new = claim(run_id, owner="new-worker")
    assert new is not None
    assert new.lease.epoch == old.lease.epoch + 1
    return old, new


def stop_after_the_turn(run: Run) -> None:
    """Drive the run until its first model turn committed, then 'kill' the worker."""

    def hook(name: str, count: int) -> None:
        if name == "commit" and Event.objects.filter(run=run, type=ev.ASSISTANT).exists():
            raise SimulatedCrash(name)

    with fault_hook(hook), pytest.raises(SimulatedCrash):
        execute_run(run.pk)


def test_a_taken_over_worker_stops_without_writing_an_event(staff, fake):
    """CLU-2: the old executor's first write is refused by the epoch; it stops."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    events_before = list(Event.objects.values_list("pk", flat=True))
    old, new = taken_over(run.pk)

    assert Executor(old).drive() == Outcome.FENCED

    assert old.signals.lost
    assert list(Event.objects.values_list("pk", flat=True)) == events_before
    run.refresh_from_db()
    assert (run.epoch, run.lease_owner, run.status) == (new.lease.epoch, "new-worker", "running")
    # The new holder is unaffected and finishes the run.
    assert Executor(new).drive() == Run.Status.COMPLETED


def test_a_fenced_transactional_write_rolls_back_with_its_note(staff, fake, effects):
    """TOOL-4 + CLU-2: `notes.write` runs inside the transaction that records its result;
    when that write is fenced, the note it created is rolled back with it."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    stop_after_the_turn(run)
    events_before = Event.objects.filter(run=run).count()
    old, new = taken_over(run.pk)
    created = []

    def spy(sender, instance, **kwargs):
        created.append(instance.title)

    post_save.connect(spy, sender=Note, dispatch_uid="fencing-spy")
    try:
        assert Executor(old).drive() == Outcome.FENCED
    finally:
        post_save.disconnect(sender=Note, dispatch_uid="fencing-spy")

    assert created == [NOTE_CALL["arguments"]["title"]]  # the tool did run ...
    assert not Note.objects.exists()  # ... and its note went with the fenced write
    assert Event.objects.filter(run=run).count() == events_before
    assert effect_lines(effects, run.pk) == []
    statuses = dict(ToolInvocation.objects.filter(run=run).values_list("call_id", "status"))
    assert statuses == {NOTE_CALL["id"]: "authorised", EXTERNAL_CALL["id"]: "authorised"}

    assert Executor(new).drive() == Run.Status.COMPLETED
    assert Note.objects.filter(run=run).count() == 1
    assert len(effect_lines(effects, run.pk)) == 1


def test_a_fenced_worker_never_sends_an_external_effect(staff, fake, effects):
    """TOOL-4 + CLU-2: the effect_sent_at watermark is written fenced before the effect;
    a taken-over worker is stopped there, so the effect never happens twice."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")

    def stop_after_note(name: str, count: int) -> None:
        if name == "commit" and Note.objects.filter(run=run).exists():
            raise SimulatedCrash(name)

    with fault_hook(stop_after_note), pytest.raises(SimulatedCrash):
        execute_run(run.pk)
    old, new = taken_over(run.pk)

    assert Executor(old).drive() == Outcome.FENCED

    assert effect_lines(effects, run.pk) == []
    invocation = ToolInvocation.objects.get(run=run, call_id=EXTERNAL_CALL["id"])
    assert invocation.effect_sent_at is None
    assert Executor(new).drive() == Run.Status.COMPLETED
    assert len(effect_lines(effects, run.pk)) == 1


def test_a_live_lease_cannot_be_claimed_and_an_expired_one_spends_an_attempt(staff, fake):
    """CLU-2, CLU-3: only a queued run or one whose lease expired is claimable."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    first = claim(run.pk, owner="a")
    assert first is not None and not first.reclaimed and first.attempts == 0

    assert claim(run.pk, owner="b") is None

    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    second = claim(run.pk, owner="b")
    assert second is not None
    assert (second.lease.epoch, second.reclaimed, second.attempts) == (
        first.lease.epoch + 1,
        True,
        1,
    )


@pytest.mark.django_db(transaction=True)
def test_a_run_another_worker_is_claiming_is_skipped_not_waited_for(staff, fake):
    """CLU-2: `FOR UPDATE SKIP LOCKED` — while another transaction holds the run row, a
    claim returns at once with nothing instead of blocking."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=run.pk)
                locked.set()
                release.wait(10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(10)
        assert claim(run.pk) is None
    finally:
        release.set()
        holder.join(10)
    assert claim(run.pk) is not None


# --- TOOL-3 ----------------------------------------------------------------------------


def test_the_idempotency_key_depends_on_what_the_call_is_never_on_the_attempt(staff, fake):
    """TOOL-3: a crash after the turn committed and a resume (a second attempt) find the
    same invocation rows under the same keys; nothing is authorised twice."""
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    stop_after_the_turn(run)
    before = dict(ToolInvocation.objects.filter(run=run).values_list("call_id", "idempotency_key"))
    expire_lease(run.pk)

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert run.attempts == 1
    after = dict(ToolInvocation.objects.filter(run=run).values_list("call_id", "idempotency_key"))
    assert after == before
    for call in (NOTE_CALL, EXTERNAL_CALL):
        tool = REGISTRY.by_wire(call["name"])
        expected = idempotency_key(
            run.pk, 0, ProposedCall(call["id"], tool.name, call["arguments"]), tool
        )
        assert after[call["id"]] == expected
    assert [k for k, _ in history(run.pk)].count(ev.TOOL_RESULT) == 2


def test_the_idempotency_key_covers_every_identity_field_and_only_those():
    tool = REGISTRY.get("notes.write")
    call = ProposedCall("c1", "notes.write", {"title": "t", "body": "b"})
    key = idempotency_key(7, 1, call, tool)

    # Canonical arguments: key order does not matter; raw text kept for replay neither.
    reordered = ProposedCall("c1", "notes.write", {"body": "b", "title": "t"}, raw_arguments=None)
    assert idempotency_key(7, 1, reordered, tool) == key
    variants = [
        idempotency_key(8, 1, call, tool),
        idempotency_key(7, 2, call, tool),
        idempotency_key(7, 1, ProposedCall("c2", "notes.write", call.arguments), tool),
        idempotency_key(7, 1, ProposedCall("c1", "notes.write", {"title": "t", "body": "B"}), tool),
        idempotency_key(
            7, 1, ProposedCall("c1", "notes.read", call.arguments), REGISTRY.get("notes.read")
        ),
    ]
    assert key not in variants
    assert len(set(variants)) == len(variants)


def test_the_idempotency_key_is_unique_constrained(staff, fake):
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    fields = dict(
        run=run,
        turn_index=0,
        call_id="c",
        tool="test.echo",
        tool_version="1",
        arguments={},
        arguments_digest="d",
        idempotency_key="the-same-key",
        status=ToolInvocation.Status.AUTHORISED,
    )
    ToolInvocation.objects.create(**fields)

    with pytest.raises(IntegrityError), transaction.atomic():
        ToolInvocation.objects.create(**{**fields, "call_id": "other"})


# --- LOOP-5 ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_no_transaction_is_open_across_a_provider_call_or_an_external_tool(
    staff, fake, effects, monkeypatch
):
    """LOOP-5: the worker holds no database transaction while it waits on the model or on
    a tool with an external effect (only the transactional `notes.write` runs inside the
    transaction that records it, by design: TOOL-4)."""
    from agentruns.runtime.actions import send, tool_calls

    seen: list[tuple[str, bool]] = []
    real_dispatch, real_run_tool = send.dispatch, tool_calls.run_tool

    def dispatch(*args, **kwargs):
        seen.append(("provider", connection.in_atomic_block))
        return real_dispatch(*args, **kwargs)

    def run_tool(tool, call, context, *, savepoint=False):
        if not tool.transactional:
            seen.append((tool.name, connection.in_atomic_block))
        return real_run_tool(tool, call, context, savepoint=savepoint)

    monkeypatch.setattr(send, "dispatch", dispatch)
    monkeypatch.setattr(tool_calls, "run_tool", run_tool)
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    assert seen == [
        ("provider", False),
        ("test.external_write", False),
        ("provider", False),
    ]
