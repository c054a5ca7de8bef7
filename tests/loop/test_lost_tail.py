"""LOOP-3, TOOL-4, CLU-2: a database crash may lose a tail of steps that were committed
without waiting for the WAL flush (a model reply, a read-only result). A worker whose
pool hands it a fresh connection after the crash must not act on the lost steps: its
next write is refused because the log no longer holds the newest event it knows, so no
effect follows a decision that is gone and the log never gets a gap."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.models import Checkpoint, Event, Note, Run, ToolInvocation
from agentruns.runtime.loop import Outcome, execute_run
from tests.support.crash import (
    effect_lines,
    expire_lease,
    fault_hook,
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


def lose_the_model_reply(run: Run) -> None:
    """What a crash does to the newest step that did not wait for the WAL flush."""
    reply = Event.objects.get(run=run, type=ev.ASSISTANT)
    Checkpoint.objects.filter(run=run, last_sequence__gte=reply.sequence).delete()
    ToolInvocation.objects.filter(run=run).delete()
    reply.delete()


def test_a_worker_does_not_act_on_a_step_the_database_lost(staff, fake, effects):
    two_tool_configuration(fake)
    run = submit(staff, "two-tool")
    lost = []

    def hook(name: str, count: int) -> None:
        if name == "commit" and not lost:
            lost.append(True)
            lose_the_model_reply(run)

    with fault_hook(hook):
        assert execute_run(run.pk) == Outcome.FENCED

    # Neither tool ran on the strength of the lost reply, and nothing was appended after it.
    assert not Note.objects.exists()
    assert effect_lines(effects, run.pk) == []
    assert list(Event.objects.filter(run=run).values_list("type", flat=True)) == [ev.USER]

    # Recovery redoes the lost turn: every call runs once and the log has no gap.
    expire_lease(run.pk)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert Note.objects.filter(run=run).count() == 1
    assert len(effect_lines(effects, run.pk)) == 1
    sequences = list(Event.objects.filter(thread=run.thread).values_list("sequence", flat=True))
    assert sequences == list(range(1, len(sequences) + 1))
