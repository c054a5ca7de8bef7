"""Endings (LOOP-4, HITL-1, HITL-11): finishing, parking on a ticket, releasing to the
queue, and closing the open calls of a run that ends early."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.errors import Fenced
from agentruns.models import Checkpoint, Run, Ticket
from agentruns.runtime.actions.base import Items, Outcome, RunContext
from agentruns.runtime.effects import close_open_calls
from agentruns.runtime.handback import (
    child_class,
    child_result,
    hand_back,
    lock_parent,
)
from agentruns.runtime.state import (
    ProposedCall,
    Turn,
)
from agentruns.store.records import Rows
from agentruns.store.rows import Ending, InvocationChange, NewTicket, RunUpdate
from agentruns.store.transitions import (
    cancel_requester,
    lease_cancel_flag,
    renew_if_due,
)
from agentruns.store.wakeups import enqueue_wake
from agentruns.tools.builtin import wait_due
from agentruns.tools.policy import (
    catalog_fingerprint,
)
from agentruns.tools.registry import (
    REGISTRY,
    Human,
    digest,
)

logger = logging.getLogger(__name__)


def boundary(ctx: RunContext) -> Outcome | None:
    """Between durable steps: honour a cancel (HITL-11) or a shutdown, and keep the lease."""
    signals = ctx.signals
    if signals.lost:
        raise Fenced("the lease was taken by another worker")
    if signals.cancel_requested:
        return _cancelled(ctx)
    if signals.stop_requested:
        return release(ctx)
    renew_if_due(ctx.lease, signals)
    return None


def park(ctx: RunContext, call: ProposedCall) -> Outcome:
    """HITL-1, HITL-2: one committed ticket; the run then holds no worker or lease."""
    tool = REGISTRY.get(call.name)
    assert tool is not None and call.arguments is not None
    ask = tool.human is Human.INPUT
    now = timezone.now()
    kind = Ticket.Kind.REMOTE_INPUT if ask else Ticket.Kind.TOOL_PERMISSION
    deadline: datetime | None = now + timedelta(seconds=ctx.config.approval_timeout_seconds)
    if tool.human is Human.TIMER:  # SCHED-3: the deadline is the due time
        due, _problem = wait_due(call.arguments, now)
        assert due is not None  # call_tools answered a call without one
        deadline, kind = due, Ticket.Kind.TIMER
    return _park(ctx, [(_ticket(ctx, call, kind, deadline, ask=ask), None)])


def park_delegations(
    ctx: RunContext, starts: Sequence[tuple[ProposedCall, Callable[[], int]]]
) -> Outcome:
    """DEL-1: every delegation of the turn starts its child (`start_child` returns its
    id) and the run parks on a `delegation` ticket per call, all in one transaction, so
    the siblings run at once and none can end before its parent parked. The tickets wait
    for nobody but their children, so they have no deadline."""
    kind = Ticket.Kind.DELEGATION
    return _park(ctx, [(_ticket(ctx, call, kind, None), start) for call, start in starts])


def _ticket(
    ctx: RunContext,
    call: ProposedCall,
    kind: str,
    deadline: datetime | None,
    *,
    ask: bool = False,
) -> NewTicket:
    assert call.arguments is not None
    return NewTicket(
        correlation_id=uuid.uuid4(),
        run_id=ctx.lease.run_id,
        thread_id=ctx.lease.thread_id,
        snapshot_id=ctx.config.snapshot_id,
        catalog_fingerprint=catalog_fingerprint(ctx.offered(), ctx.mode.deferred),
        deadline=deadline,
        kind=kind,
        call_id=call.id,
        tool=call.name,
        arguments=call.arguments,
        arguments_digest=digest(call.arguments),
        question=call.arguments.get("question", "") if ask else "",
        schema=call.arguments.get("schema") if ask else None,
    )


def _park(
    ctx: RunContext, tickets: Sequence[tuple[NewTicket, Callable[[], int] | None]]
) -> Outcome:
    """HITL-1, HITL-2: the tickets, committed with the parked run; a child each starts
    (DEL-1) commits with them, after the cancel check."""
    with transaction.atomic():
        cancelled = _cancel_landed(ctx)
        if not cancelled:
            opened: Items = []
            written_tickets = []
            for ticket, start_child in tickets:
                item = ev.TicketOpened(
                    correlation_id=str(ticket.correlation_id),
                    call_id=ticket.call_id,
                    kind=ticket.kind,
                    tool=ticket.tool,
                    deadline=ticket.deadline.isoformat() if ticket.deadline else None,
                )
                if start_child is not None:
                    child = start_child()
                    ticket, item = ticket._replace(child_id=child), replace(item, child=child)
                written_tickets.append(ticket)
                opened.append(item.item())
            written = ctx.write(
                opened,
                checkpoints=((Checkpoint.Kind.SUSPENSION, None),),
                rows=lambda: Rows(
                    run_update=_run_row(ctx, Run.Status.AWAITING), new_tickets=written_tickets
                ),
            )
    if cancelled:
        return _cancelled(ctx)
    ctx.committed(written)
    return Outcome.AWAITING


def _cancelled(ctx: RunContext) -> Outcome:
    """HITL-11 for a running run; OPS-5: `by` names who asked, as a parked cancel's does."""
    by = cancel_requester(ctx.lease.run_id)
    return finish(ctx, Run.Status.CANCELLED, [ev.RunCancelled(by).item()])


def _cancel_landed(ctx: RunContext) -> bool:
    """HITL-11: a cancel that landed while the turn's calls ran must not be parked
    over. Read under the run's row lock: a cancel that commits first is seen here, one
    that commits later finds the run awaiting (and voids the ticket itself)."""
    flag = lease_cancel_flag(ctx.lease)
    if flag is None:
        raise Fenced("the lease was taken by another worker")
    if flag:
        ctx.signals.request_cancel()
    return ctx.signals.cancel_requested


def release(ctx: RunContext) -> Outcome:
    """A worker shutting down hands the run back without spending an attempt."""
    with transaction.atomic():
        written = ctx.write([], rows=Rows(run_update=_run_row(ctx, Run.Status.QUEUED)))
        enqueue_wake(ctx.lease.run_id)
    ctx.committed(written)
    return Outcome.RELEASED


def finish_failed(
    ctx: RunContext,
    code: str,
    detail: str,
    *,
    fields: dict[str, Any] | None = None,
    extra: Items | None = None,
) -> Outcome:
    failed = ev.RunFailed(code, detail, dict(fields or {}))
    failure = failed.to_payload()  # the run row's `failure` too
    return finish(ctx, Run.Status.FAILED, [*(extra or []), failed.item()], failure=failure)


def finish(
    ctx: RunContext,
    status: str,
    items: Items,
    *,
    final_reply: str = "",
    failure: dict[str, Any] | None = None,
) -> Outcome:
    """The one place a run's terminal state is written."""
    updates: list[InvocationChange] = []
    if status == Run.Status.COMPLETED:
        # CG-12: the final reply is the last reply's text, with its class
        completed = ev.RunCompleted(final_reply, _reply_label(ctx, items))
        items = [*items, completed.item()]
    elif ctx.state.turn:
        interrupted, updates = _interrupted(ctx, ctx.state.turn)
        items = [*interrupted, *items]
    ending = partial(
        ctx.write,
        items,
        checkpoints=((Checkpoint.Kind.TERMINAL, None),),
        rows=lambda: Rows(
            invocation_updates=updates,
            run_update=_run_row(ctx, status, Ending(final_reply, failure)),
        ),
    )
    parent = ctx.parent
    if parent is None:
        ctx.committed(ending())
        return Outcome(status)
    with transaction.atomic():  # DEL-1: the child's end and its hand-back commit together
        lock_parent(parent)
        written = ending()
        result, content = child_result(ctx.lease.run_id, status, final_reply, failure)
        hand_back(
            child_id=ctx.lease.run_id,
            parent=parent,
            status=result,
            content=content,
            data_class=child_class(ctx.lease.run_id, [*ctx.events, *written]),
            tool_calls=ctx.state.tool_calls_used,
        )
    ctx.committed(written)
    return Outcome(status)


def _reply_label(ctx: RunContext, items: Items) -> dict[str, Any] | None:
    """The label of the newest reply: among the items being written, else in the log."""
    for kind, payload in reversed(items):
        if kind == ev.ASSISTANT:
            return ev.AssistantMessage.from_payload(payload).label
    for event in reversed(ctx.events):
        if isinstance(turn := event.data, ev.AssistantMessage):
            return turn.label
    return None


def _interrupted(ctx: RunContext, turn: Turn) -> tuple[Items, list[InvocationChange]]:
    """The open calls of a run that ends early, closed (`close_open_calls`)."""
    open_calls = turn.open_calls()
    ctx.load_invocations(turn, open_calls)
    rows = {
        call.id: (invocation.pk, invocation.effect_sent_at is not None)
        for call in open_calls
        if (invocation := ctx.invocations.get(call.id)) is not None
    }
    return close_open_calls(open_calls, rows, timezone.now())


def _run_row(ctx: RunContext, status: str, ending: Ending | None = None) -> RunUpdate:
    """The run row's cached columns as of the folded state; parking or ending frees
    the lease."""
    return RunUpdate(
        status=status,
        ending=ending,
        turns=ctx.state.turns,
        tool_calls_used=ctx.state.tool_calls_used,
        last_sequence=ctx.state.last_sequence,
    )
