"""SEC-13: retention is a management command, `prune_runs --before DATE [--dry-run]`:
threads whose runs all ended before the cutoff go with everything that hangs off them, in
batches, with a summary; live runs, their threads and anything newer stay."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agentruns.models import (
    Checkpoint,
    Event,
    GateAudit,
    Note,
    Run,
    Thread,
    Ticket,
    ToolInvocation,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import ResumeCommand, run_resume
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import write_call
from tests.support.runs import park, submit

pytestmark = pytest.mark.django_db

WRITE = [{"tool_calls": [write_call("Minutes", "kept for a while")]}, {"text": "done"}]
LONG_AGO = timezone.now() - timedelta(days=400)
CUTOFF = (timezone.now() - timedelta(days=365)).date().isoformat()


def age(run: Run) -> None:
    """As if the run ended (or last changed) long ago."""
    Run.objects.filter(pk=run.pk).update(updated_at=LONG_AGO, created_at=LONG_AGO)
    Thread.objects.filter(pk=run.thread_id).update(created_at=LONG_AGO)


def finished(user, text: str = "go", **kw) -> Run:
    run = submit(user, "keep", text, **kw)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return Run.objects.get(pk=run.pk)


def answered(user, approver) -> Run:
    run = park(user, "ask")
    ticket = Ticket.objects.get(run=run)
    command = ResumeCommand(identity=ticket.identity, answer="permission", decision="deny")
    run_resume(user=approver, run_id=run.pk, command=command)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return Run.objects.get(pk=run.pk)


@pytest.fixture
def world(member, django_user_model):
    """Old finished threads (two), a recent one, an old thread whose second run is live,
    and an old run still waiting for an answer."""
    hook = Webhook.objects.create(url="https://hooks.example.com/in", secret="s" * 16)
    scripted_configuration("keep", WRITE, approval_exempt_tools=["notes.write"])
    scripted_configuration("ask", [{"tool_calls": [write_call("Wait")]}, {"text": "x"}])
    approver = grant(django_user_model.objects.create_user("appr"), "approve_run")
    old = [finished(member), answered(member, approver)]
    recent = finished(member)
    continued_first = finished(member)
    continued_live = submit(member, "keep", "again", thread=continued_first.thread_id)
    waiting = park(member, "ask")
    for run in [*old, continued_first, waiting]:
        age(run)
    delivery = WebhookDelivery.objects.filter(run_id=old[0].pk).first()
    WebhookDelivery.objects.filter(run_id=old[0].pk).update(status=WebhookDelivery.Status.DELIVERED)
    WebhookAttempt.objects.create(delivery=delivery, status_code=200, latency_ms=2)
    pending = WebhookDelivery.objects.filter(run_id=old[1].pk).first()  # still in the outbox
    GateAudit.objects.create(
        verdict="refused", enforcement="enforced", configuration="keep", run_id=old[0].pk
    )
    return {
        "old": old,
        "kept": [recent, continued_first, continued_live, waiting],
        "hook": hook,
        "pending": pending,
    }


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune_runs", "--before", CUTOFF, *args, stdout=out)
    return out.getvalue()


def hanging(runs: list[Run]) -> dict[str, int]:
    ids = [run.pk for run in runs]
    threads = [run.thread_id for run in runs]
    return {
        "runs": Run.objects.filter(pk__in=ids).count(),
        "threads": Thread.objects.filter(pk__in=threads).count(),
        "events": Event.objects.filter(thread_id__in=threads).count(),
        "invocations": ToolInvocation.objects.filter(run_id__in=ids).count(),
        "checkpoints": Checkpoint.objects.filter(run_id__in=ids).count(),
        "notes": Note.objects.filter(run_id__in=ids).count(),
        "tickets": Ticket.objects.filter(run_id__in=ids).count(),
    }


def test_sec13_a_dry_run_counts_and_deletes_nothing(world):
    before = hanging(world["old"])
    out = prune("--dry-run")
    assert out.startswith("Would delete ") and "2 threads" in out and "2 runs" in out
    assert f"{before['events']} events" in out and "1 notes" in out and "1 tickets" in out
    assert hanging(world["old"]) == before


def test_sec13_prune_deletes_old_finished_threads_and_what_hangs_off_them(world):
    delivered = WebhookDelivery.objects.filter(status="delivered").count()
    out = prune("--batch-size", "1")
    assert out.startswith("Deleted ") and "2 threads" in out and "2 runs" in out
    assert f"{delivered} webhook deliveries" in out and "2 batch(es)" in out
    assert set(hanging(world["old"]).values()) == {0}
    assert not WebhookAttempt.objects.exists()
    # The pending delivery stays in the outbox; the audit stays.
    assert WebhookDelivery.objects.filter(pk=world["pending"].pk).exists()
    assert GateAudit.objects.filter(run_id=world["old"][0].pk).exists()


def test_sec13_prune_never_touches_live_runs_their_threads_or_recent_ones(world):
    kept = world["kept"]
    before = hanging(kept)
    statuses = {run.pk: Run.objects.get(pk=run.pk).status for run in kept}
    assert set(statuses.values()) == {"completed", "queued", "awaiting"}
    prune()
    assert hanging(kept) == before
    assert {run.pk: Run.objects.get(pk=run.pk).status for run in kept} == statuses
    assert prune().startswith("Deleted 0 notes")  # a second pass finds nothing


def test_sec13_prune_refuses_a_cutoff_it_cannot_read_or_in_the_future():
    with pytest.raises(CommandError, match="not a date"):
        call_command("prune_runs", "--before", "last year")
    with pytest.raises(CommandError, match="future"):
        tomorrow = (timezone.now() + timedelta(days=1)).date().isoformat()
        call_command("prune_runs", "--before", tomorrow)
