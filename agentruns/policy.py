"""Who may do what, each rule written once: seeing (SEC-2), the playground (FS-5), steering
a thread (SEC-10), cancelling (HITL-11), answering (HITL-9), four-eyes (HITL-8), who is
told of a ticket (OPS-6), metrics (OPS-3) and the audit export (OPS-5).

Each rule is a predicate over one object, with its queryset form beside it where a list
needs one. The pages, the admin, the API, the services and the notifications all ask
here. Seeing a run is decided in the models (`RunQuerySet.visible_to`), below the tools
that read application data and must apply it too; this module names it for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Model, Q, QuerySet

from agentruns.models import Note, Run, Thread, Ticket
from agentruns.models.runs import sees_all_runs

Row = TypeVar("Row", bound=Model)

APPROVE_RUN = "agentruns.approve_run"
USE_PLAYGROUND = "agentruns.use_playground"
VIEW_AUDIT = "agentruns.view_audit"


def is_approver(user: Any) -> bool:
    """HITL-9: holds `approve_run`: decides tool calls, answers questions, cancels runs."""
    return bool(user.is_authenticated and user.has_perm(APPROVE_RUN))


# SEC-2: seeing. A user sees the runs they started, unless they may see all.


def may_see_run(user: Any, run: Run) -> bool:
    return run.is_visible_to(user)


def visible_runs(user: Any) -> QuerySet[Run]:
    return Run.objects.visible_to(user).select_related("configuration", "thread", "created_by")


def visible_threads(user: Any) -> QuerySet[Thread]:
    return Thread.objects.visible_to(user).select_related("configuration")


def visible_notes(user: Any) -> QuerySet[Note]:
    return Note.objects.visible_to(user)


def visible_tickets(user: Any) -> QuerySet[Ticket]:
    return of_visible_runs(Ticket.objects.all(), user)


def of_visible_runs(rows: QuerySet[Row], user: Any, *, run: str = "run") -> QuerySet[Row]:
    """What hangs off a run (tickets, invocations, checkpoints, gate audits) is visible iff
    its run is; `run` names the field holding the run (a key or a plain id)."""
    if sees_all_runs(user):
        return rows
    return rows.filter(**{f"{run}__in": Run.objects.visible_to(user).values("pk")})


def of_visible_threads(rows: QuerySet[Row], user: Any, *, thread: str = "thread") -> QuerySet[Row]:
    """What hangs off a thread (its events, their webhook deliveries) is visible iff the
    thread is: events between runs, such as a mode switch, belong to no run."""
    if sees_all_runs(user):
        return rows
    return rows.filter(**{f"{thread}__in": Thread.objects.visible_to(user).values("pk")})


# FS-5: the playground, and what it does anywhere (forcing sources, dry runs), is for
# staff holding `use_playground`.


def may_use_playground(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff and user.has_perm(USE_PLAYGROUND))


def may_submit(user: Any, *, forcing: bool, dry_run: bool) -> bool:
    """Anyone may start a plain run; forcing sources or a dry run is the playground's."""
    return not (forcing or dry_run) or may_use_playground(user)


# SEC-10: steering is narrower than seeing. Only a thread's initiator adds a prompt to it
# or switches its mode; whoever else sees it (view_all_runs, approvers) does not.


def may_steer(user: Any, thread: Thread) -> bool:
    return bool(user.is_authenticated and thread.created_by_id == user.pk)


# HITL-11: the initiator, or an approver, may cancel a run.


def may_cancel(user: Any, run: Run) -> bool:
    return bool(user.is_authenticated and (run.created_by_id == user.pk or is_approver(user)))


# HITL-9: deciding a tool call needs `approve_run`; answering a question needs it or being
# the run's initiator.


def may_answer(user: Any, run: Run, answer: str) -> bool:
    """`answer` is the kind the ticket takes (`Ticket.Answer`)."""
    if is_approver(user):
        return True
    mine = user.is_authenticated and run.created_by_id == user.pk
    return bool(mine and answer == Ticket.Answer.INPUT)


def answerable_tickets(user: Any) -> QuerySet[Ticket]:
    """The active tickets `user` may answer (the queryset form of `may_answer`), soonest
    deadline first."""
    if not user.is_authenticated:
        return Ticket.objects.none()
    tickets = (
        visible_tickets(user)
        .filter(status=Ticket.Status.ACTIVE)
        # The provider too: each inbox card's readout names it (PERF-8: a query per card).
        .select_related("run", "run__configuration__provider", "run__created_by")
        .order_by("deadline", "id")
    )
    if is_approver(user):
        return tickets
    return tickets.filter(run__created_by=user, kind=Ticket.Kind.REMOTE_INPUT)


# HITL-8: four-eyes. Under `require_second_approver` the initiator's *allow* (never a
# deny, never an answer) is refused with `self_approval`.


@dataclass(frozen=True)
class FourEyes:
    applies: bool  # the run's configuration needs a second approver
    blocks: bool  # ...and this user started the run: their Approve is not theirs to press
    explanation: str  # why, for the card and the admin's ticket page ("" when it does not apply)


def four_eyes(user: Any, run: Run) -> FourEyes:
    if not run.configuration.require_second_approver:
        return FourEyes(applies=False, blocks=False, explanation="")
    if user.is_authenticated and run.created_by_id == user.pk:
        why = (
            "you started this run, and its configuration needs a second person to approve "
            "its tool calls. Another approver must press Approve; you may still deny."
        )
        return FourEyes(applies=True, blocks=True, explanation=why)
    initiator = run.created_by.get_username() if run.created_by else "the initiator"
    why = f"{initiator} started this run and may not approve it; you can."
    return FourEyes(applies=True, blocks=False, explanation=why)


# OPS-6: who is told when a ticket opens: whoever may answer it (HITL-9), that is the
# holders of `approve_run`, and the initiator for their own run's question.


def approvers() -> QuerySet[Any]:
    """Active users holding `approve_run` (directly, through a group, or as superusers)."""
    permission = Permission.objects.filter(
        content_type__app_label="agentruns", codename="approve_run"
    ).first()
    holds = Q(is_superuser=True)
    if permission is not None:
        holds |= Q(user_permissions=permission) | Q(groups__permissions=permission)
    return get_user_model().objects.filter(holds, is_active=True).distinct()


def recipients(ticket: Ticket, approver_emails: set[str]) -> list[str]:
    """The addresses to tell of `ticket`, given the approvers' (fetched once per pass)."""
    emails = set(approver_emails)
    initiator = ticket.run.created_by
    if ticket.answer == Ticket.Answer.INPUT and initiator and initiator.email:
        emails.add(initiator.email)
    return sorted(emails)


# OPS-3, OPS-5: operating. Metrics are for staff (or the scraper's bearer token, checked
# where the token arrives); the audit export for staff holding `view_audit`.


def may_see_metrics(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def may_export_audit(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff and user.has_perm(VIEW_AUDIT))
