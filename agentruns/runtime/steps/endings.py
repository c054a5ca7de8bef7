"""Endings (LOOP-4, HITL-1, HITL-11): finishing, parking on a ticket, releasing to the
queue, and closing the open calls of a run that ends early."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.errors import Fenced
from agentruns.models import Checkpoint, Run, Ticket
from agentruns.providers.base import Reply
from agentruns.runtime.closing import close_open_calls, closed_status
from agentruns.runtime.state import (
    ProposedCall,
    Turn,
)
from agentruns.runtime.steps.base import Items, Outcome, RunCore
from agentruns.store.transitions import (
    cancel_requester,
    lease_cancel_flag,
    released,
    renew_if_due,
)
from agentruns.store.wakeups import enqueue_wake
from agentruns.tools.policy import (
    catalog_fingerprint,
)
from agentruns.tools.registry import (
    REGISTRY,
    Human,
    digest,
)

logger = logging.getLogger(__name__)


class Endings(RunCore):
    def _boundary(self) -> Outcome | None:
        """Between steps: honour a cancel (HITL-11) or a shutdown, and keep the lease."""
        if self.lease.lost:
            raise Fenced("the lease was taken by another worker")
        if self.lease.cancel_requested:
            return self._cancelled()
        if self.lease.stop_requested:
            return self._release()
        renew_if_due(self.lease)
        return None

    def _park(self, call: ProposedCall) -> Outcome:
        """HITL-1, HITL-2: one committed ticket; the run then holds no worker or lease."""
        tool = REGISTRY.get(call.name)
        assert tool is not None and call.arguments is not None
        config = self.config
        ask = tool.human is Human.INPUT
        ticket = Ticket(
            run_id=self.lease.run_id,
            thread_id=self.lease.thread_id,
            snapshot_id=config.snapshot_id,
            catalog_fingerprint=catalog_fingerprint(self._offered(), self.mode.deferred),
            deadline=timezone.now() + timedelta(seconds=config.approval_timeout_seconds),
            kind=Ticket.Kind.REMOTE_INPUT if ask else Ticket.Kind.TOOL_PERMISSION,
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            arguments_digest=digest(call.arguments),
            question=call.arguments.get("question", "") if ask else "",
            schema=call.arguments.get("schema") if ask else None,
        )
        opened = {
            "correlation_id": str(ticket.correlation_id),
            "call_id": call.id,
            "kind": ticket.kind,
            "tool": call.name,
            "deadline": ticket.deadline.isoformat() if ticket.deadline else None,
        }
        with transaction.atomic():
            cancelled = self._cancel_landed()
            if not cancelled:
                ticket.save()
                written = self._write(
                    [(ev.TICKET_OPENED, opened)],
                    checkpoints=((Checkpoint.Kind.SUSPENSION, None),),
                    run_update=self._run_row(Run.Status.AWAITING),
                )
        if cancelled:
            return self._cancelled()
        self._committed(written)
        return Outcome.AWAITING

    def _cancelled(self) -> Outcome:
        """HITL-11 for a running run; OPS-5: `by` names who asked, as a parked cancel's does."""
        by = cancel_requester(self.lease.run_id)
        return self._finish(Run.Status.CANCELLED, [(ev.RUN_CANCELLED, {"by": by})])

    def _cancel_landed(self) -> bool:
        """HITL-11: a cancel that landed while the turn's calls ran must not be parked
        over. Read under the run's row lock: a cancel that commits first is seen here, one
        that commits later finds the run awaiting (and voids the ticket itself)."""
        flag = lease_cancel_flag(self.lease)
        if flag is None:
            raise Fenced("the lease was taken by another worker")
        self.lease.cancel_requested = self.lease.cancel_requested or flag
        return self.lease.cancel_requested

    def _reply_too_large(self, reply: Reply) -> Outcome | None:
        """SEC-3: no real turn comes near the limit; nothing of a larger reply is kept."""
        limit = settings.AGENTRUNS_MAX_REPLY_BYTES
        if reply.size <= limit:
            return None
        return self._finish_failed(
            "provider_reply_too_large",
            f"The model's reply was {reply.size} characters; at most {limit} are accepted. "
            "Nothing of it was kept.",
            fields={"size": reply.size, "limit": limit},
        )

    def _release(self) -> Outcome:
        """A worker shutting down hands the run back without spending an attempt."""
        with transaction.atomic():
            written = self._write([], run_update=self._run_row(Run.Status.QUEUED))
            enqueue_wake(self.lease.run_id)
        self._committed(written)
        return Outcome.RELEASED

    def _finish_failed(
        self,
        code: str,
        detail: str,
        *,
        fields: dict[str, Any] | None = None,
        extra: Items | None = None,
    ) -> Outcome:
        failure = {"code": code, "detail": detail, **(fields or {})}
        return self._finish(
            Run.Status.FAILED, [*(extra or []), (ev.RUN_FAILED, failure)], failure=failure
        )

    def _finish(
        self,
        status: str,
        items: Items,
        *,
        final_reply: str = "",
        failure: dict[str, Any] | None = None,
    ) -> Outcome:
        """The one place a run's terminal state is written."""
        updates: list[tuple[int, dict[str, Any]]] = []
        if status == Run.Status.COMPLETED:
            items = [*items, (ev.RUN_COMPLETED, {"final_reply": final_reply})]
        elif self.state.turn:
            interrupted, updates = self._interrupted(self.state.turn)
            items = [*interrupted, *items]
        self._commit(
            items,
            checkpoints=((Checkpoint.Kind.TERMINAL, None),),
            invocation_updates=updates,
            run_update=lambda: self._run_row(status, final_reply=final_reply, failure=failure),
        )
        return Outcome(status)

    def _interrupted(self, turn: Turn) -> tuple[Items, list[tuple[int, dict[str, Any]]]]:
        """Close the open calls of a run that ends early (`close_open_calls`), and give
        their invocation rows a final status."""
        open_calls = turn.open_calls()
        self._load_invocations(turn, open_calls)
        known = {call.id: self.invocations.get(call.id) for call in open_calls}
        sent = {cid for cid, inv in known.items() if inv and inv.effect_sent_at is not None}
        now = timezone.now()
        updates = [
            (inv.pk, {"status": closed_status(cid in sent), "completed_at": now})
            for cid, inv in known.items()
            if inv is not None
        ]
        return close_open_calls(open_calls, sent), updates

    def _run_row(self, status: str, **changes: Any) -> dict[str, Any]:
        """The run row's cached columns as of the folded state; parking or ending frees
        the lease."""
        return released(
            status,
            **changes,
            steps=self.state.steps,
            tool_calls_used=self.state.tool_calls_used,
            last_sequence=self.state.last_sequence,
        )
