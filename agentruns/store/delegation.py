"""The rows of a delegation (DEL-1): the child run a parent's `agent.delegate` call starts,
and the answer of the parent's `delegation` ticket when the child ends. The runtime decides
what they hold (`runtime/actions/delegation.py`, `runtime/handback.py`); these write them,
inside the caller's transaction."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from agentruns import events as ev
from agentruns.models import Configuration, GateAudit, Run, Thread, Ticket, ToolInvocation
from agentruns.store.appends import append_events
from agentruns.store.tickets import TicketRaced, invocation_settle, ticket_resolve_answered
from agentruns.store.transitions import run_requeue_answered
from agentruns.store.wakeups import enqueue_wake


def run_lock(run_id: int) -> None:
    """The run's row lock (a child's end takes its parent's before its own row)."""
    Run.objects.select_for_update().filter(pk=run_id).values_list("pk", flat=True).first()


def configuration_active(slug: str) -> bool:
    return Configuration.objects.filter(slug=slug, active=True).exists()


def audited_classes(run_id: int) -> set[str]:
    """The classes the gate's rows of the run name (each send's strictest source)."""
    return set(GateAudit.objects.filter(run_id=run_id).values_list("data_class", flat=True))


def child_create(
    *,
    parent_id: int,
    call_id: str,
    slug: str,
    task: str,
    opening: ev.RunDelegated,
    label: dict[str, Any] | None = None,
) -> int:
    """A queued child run of `slug` for the parent's initiator, on a new thread whose log
    opens with `run.delegated` (`opening`) and the task, labelled as the parent's reply
    that wrote it (CG-12); its wake-up commits with it."""
    configuration = Configuration.objects.get(slug=slug)
    parent = Run.objects.values("created_by_id", "root_id").get(pk=parent_id)
    owner = parent["created_by_id"]
    thread = Thread.objects.create(configuration=configuration, created_by_id=owner)
    child = Run.objects.create(
        thread=thread,
        configuration=configuration,
        input=task,
        created_by_id=owner,
        parent_id=parent_id,
        parent_call_id=call_id,
        root_id=parent["root_id"] or parent_id,
    )
    append_events(
        thread_id=thread.pk,
        run_id=child.pk,
        items=[opening.item(), ev.UserMessage(task, label=label).item()],
    )
    enqueue_wake(child.pk)
    return child.pk


def delegation_answer(
    *, parent_id: int, call_id: str, child_id: int, result: tuple[str, dict[str, Any]]
) -> bool:
    """The parent's active delegation ticket for this child answered (a conditional
    update), the call's invocation completed, the decision and `result` (a `tool.result`
    item) appended, and, once no sibling's ticket is still active, the parent queued with
    its wake-up: what a person's answer does (services/resume.py). False when no such
    ticket is active. Under the parent's row lock, which every sibling's end takes first,
    so of two siblings ending at once the later sees the earlier's answer and exactly one
    wakes the parent."""
    now = timezone.now()
    ticket = Ticket.objects.filter(
        run_id=parent_id,
        child_id=child_id,
        kind=Ticket.Kind.DELEGATION,
        status=Ticket.Status.ACTIVE,
    ).first()
    if ticket is None:
        return False
    status = result[1]["status"]
    resolution = {"decision": ev.DELEGATED, "child": child_id, "status": status}
    try:
        ticket_resolve_answered(ticket.pk, now=now, resolution=resolution)
    except TicketRaced:
        return False
    ok = status == ev.OK
    invocation_settle(
        parent_id,
        call_id,
        status=ToolInvocation.Status.COMPLETED if ok else ToolInvocation.Status.FAILED,
        result={"ok": ok, "data": {"child": child_id}},
        completed_at=now,
    )
    decided = ev.TicketDecided(str(ticket.correlation_id), call_id, ev.DELEGATED, child=child_id)
    append_events(thread_id=ticket.thread_id, run_id=parent_id, items=[decided.item(), result])
    waiting = Ticket.objects.filter(run_id=parent_id, status=Ticket.Status.ACTIVE).exists()
    if not waiting:  # DEL-1: the parent goes on when all its siblings have ended
        run_requeue_answered(parent_id)
        enqueue_wake(parent_id)
    return True
