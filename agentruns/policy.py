"""Who may do what, each rule written once: seeing (SEC-2), the playground (FS-5), steering
a thread (SEC-10), cancelling (HITL-11), answering (HITL-9), four-eyes (HITL-8), routing
and escalation (HITL-14, HITL-15), who is told of a ticket (OPS-6), metrics (OPS-3) and
the audit export (OPS-5).

Each rule is a predicate over one object, with its queryset form beside it where a list
needs one. The pages, the admin, the API, the services and the notifications all ask
here. Seeing a run is decided in the models (`RunQuerySet.visible_to`), below the tools
that read application data and must apply it too; this module names it for the rest.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import Any, TypeVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import (
    Case,
    DurationField,
    ExpressionWrapper,
    F,
    Model,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.lookups import LessThanOrEqual
from django.utils import timezone

from agentruns.models import ChangeRequest, Configuration, Note, Replay, Run, Thread, Ticket
from agentruns.models.runs import sees_all_runs

Row = TypeVar("Row", bound=Model)

APPROVE_RUN = "agentruns.approve_run"
USE_PLAYGROUND = "agentruns.use_playground"
VIEW_AUDIT = "agentruns.view_audit"
VIEW_ALL_RUNS = "agentruns.view_all_runs"


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
    """SEC-2 narrowed by routing (HITL-14): an approver who sees every run through
    `approve_run` alone sees a routed ticket only if it is routed to them, or if the run
    is theirs; `view_all_runs` (an auditor's right) still sees every ticket."""
    tickets = of_visible_runs(Ticket.objects.all(), user)
    if not is_approver(user) or user.has_perm(VIEW_ALL_RUNS):
        return tickets
    return tickets.filter(Q(run__created_by=user) | _decides(user, timezone.now()))


def may_see_ticket(user: Any, ticket: Ticket) -> bool:
    return visible_tickets(user).filter(pk=ticket.pk).exists()


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


def visible_replays(user: Any) -> QuerySet[Replay]:
    """GOV-4: a replay is its initiator's, like its runs (SEC-2); those who see every run
    see every replay."""
    replays = Replay.objects.select_related("configuration", "created_by")
    if sees_all_runs(user):
        return replays
    if not user.is_authenticated:
        return replays.none()
    return replays.filter(created_by=user)


def may_submit(user: Any, *, forcing: bool, dry_run: bool) -> bool:
    """Anyone may start a plain run; forcing sources or a dry run is the playground's."""
    return not (forcing or dry_run) or may_use_playground(user)


# SEC-10: steering is narrower than seeing. Only a thread's initiator adds a prompt to it
# or switches its mode; whoever else sees it (view_all_runs, approvers) does not.


def may_steer(user: Any, thread: Thread) -> bool:
    return bool(user.is_authenticated and thread.created_by_id == user.pk)


# HITL-11: the initiator, or an approver, may cancel a run. While it waits on a ticket,
# only an approver who may decide that ticket (HITL-14's routing): cancelling voids the
# ticket, a decision by another name, which an approver outside its groups may not make.


def may_cancel(user: Any, run: Run) -> bool:
    if not user.is_authenticated:
        return False
    if run.created_by_id == user.pk:
        return True
    if not is_approver(user):
        return False
    ticket = Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).first()
    return ticket is None or may_decide(user, ticket)


# HITL-9: deciding a tool call needs `approve_run`; answering a question needs it or being
# the run's initiator.


def may_answer_some(ticket: Ticket) -> bool:
    """Whether any person answers `ticket`: not the clock's timer nor a child's wait."""
    return ticket.answer not in (Ticket.Answer.TIMER, Ticket.Answer.DELEGATION)


def may_answer(user: Any, run: Run, answer: str) -> bool:
    """`answer` is the kind the ticket takes (`Ticket.Answer`). Routing (HITL-14) is
    `may_decide`'s; this is the rule before a ticket's configuration narrows it. Nobody
    answers a timer: the clock does (SCHED-3); nor a delegation: its child run's end does
    (DEL-1)."""
    if answer in (Ticket.Answer.TIMER, Ticket.Answer.DELEGATION):
        return False  # as `may_answer_some`
    if is_approver(user):
        return True
    mine = user.is_authenticated and run.created_by_id == user.pk
    return bool(mine and answer == Ticket.Answer.INPUT)


def may_decide(user: Any, ticket: Ticket) -> bool:
    """HITL-9 and HITL-14 for one ticket: an approver the ticket is routed to, or the
    initiator answering their own run's question."""
    mine = user.is_authenticated and ticket.run.created_by_id == user.pk
    if mine and ticket.answer == Ticket.Answer.INPUT:
        return True
    return bool(is_approver(user) and decided_by(user, ticket, timezone.now()))


def answerable_tickets(user: Any) -> QuerySet[Ticket]:
    """The active tickets `user` may answer (the queryset form of `may_answer`), soonest
    deadline first."""
    if not user.is_authenticated:
        return Ticket.objects.none()
    tickets = (
        visible_tickets(user)
        .filter(status=Ticket.Status.ACTIVE)
        # The clock's (SCHED-3) and a child run's (DEL-1) to answer, nobody else's.
        .exclude(kind__in=[Ticket.Kind.TIMER, Ticket.Kind.DELEGATION])
        # The provider too: each inbox card's readout names it (PERF-8: a query per card).
        .select_related("run", "run__configuration__provider", "run__created_by")
        .order_by("deadline", "id")
    )
    own_questions = Q(run__created_by=user, kind=Ticket.Kind.REMOTE_INPUT)
    if is_approver(user):
        return tickets.filter(own_questions | _decides(user, timezone.now()))
    return tickets.filter(own_questions)


# HITL-14, HITL-15: routing. A configuration with `approver_groups` is decided only by
# members of those groups holding `approve_run`; once 80 % of a ticket's deadline has
# passed, members of its `escalation_group` holding `approve_run` decide it too (HITL-9
# still holds: a group never grants deciding by itself). Superusers are no exception:
# routing names people, and a superuser outside the groups is not one of them. The one
# rule's forms side by side: the tickets a user decides (`_routes`, `_decides`), the
# predicate (`decided_by`, the same query for one row), the users who decide a ticket
# (`deciders`), and why a card reached its viewer (`with_access`).

# Escalation begins when this share of the time between a ticket opening and its
# deadline is left (80 % has passed).
ESCALATION_REMAINING = 0.2
APPROVER, GROUP_MEMBER, ESCALATION, INITIATOR = (
    "approver",
    "group member",
    "escalation",
    "initiator",
)


def escalation_due(now: datetime, configurations: QuerySet | None = None) -> Q:
    """Tickets (of `configurations` with an escalation group, all such by default) of
    whose own time 80 % has passed at `now`: the deadline is at most 20 % of the span from
    the ticket's opening to its deadline away. Measured on the ticket, not on its
    configuration's `approval_timeout_seconds`: the deadline was fixed when it opened
    (HITL-7), so a timeout raised or lowered since moves neither (issue 48, item 8)."""
    if configurations is None:
        configurations = Configuration.objects.filter(escalation_group__isnull=False)
    span = ExpressionWrapper(F("deadline") - F("created_at"), output_field=DurationField())
    left = ExpressionWrapper(F("deadline") - Value(now), output_field=DurationField())
    remaining = ExpressionWrapper(span * ESCALATION_REMAINING, output_field=DurationField())
    return Q(LessThanOrEqual(left, remaining), run__configuration__in=configurations.values("pk"))


def any_of(conditions: Iterable[Q]) -> Q:
    """The OR of `conditions`; of none, a condition nothing meets."""
    return reduce(operator.or_, conditions, Q(pk__in=[]))


def _routes(user: Any, now: datetime) -> list[tuple[str, Q]]:
    """Each way a ticket reaches an approver (the caller has checked `is_approver`), with
    the word its card gives for it (UI-3)."""
    groups = user.groups.values("pk")
    escalated = Configuration.objects.filter(escalation_group__in=groups).values("pk")
    return [*_configuration_routes(user), (ESCALATION, escalation_due(now, escalated))]


def _configuration_routes(user: Any) -> list[tuple[str, Q]]:
    """The routes that depend on a run's configuration alone, not on a ticket's deadline:
    for any row with a `run` (a ticket, a tool call)."""
    routed = Configuration.objects.filter(approver_groups__isnull=False).values("pk")
    mine = Configuration.objects.filter(approver_groups__in=user.groups.values("pk"))
    return [
        (APPROVER, ~Q(run__configuration__in=routed)),
        (GROUP_MEMBER, Q(run__configuration__in=mine.values("pk"))),
    ]


def routed_calls(user: Any) -> Q:
    """HITL-14 for TOOL-4's uncertain calls, which an approver is shown but which are not
    tickets: a routed configuration's go to its groups' approvers (and the run's
    initiator), as its tickets do; no deadline, so no escalation. `view_all_runs` (an
    auditor's right) sees them all, as it sees every ticket."""
    if user.has_perm(VIEW_ALL_RUNS):
        return Q()
    routes = (route for _, route in _configuration_routes(user))
    return reduce(operator.or_, routes, Q(run__created_by=user))


def _decides(user: Any, now: datetime) -> Q:
    """The tickets an approver decides."""
    return reduce(operator.or_, (route for _, route in _routes(user, now)))


def decided_by(user: Any, ticket: Ticket, now: datetime) -> bool:
    """Whether routing lets `user` (an approver) decide `ticket` at `now`."""
    return Ticket.objects.filter(_decides(user, now), pk=ticket.pk).exists()


def deciders(ticket: Ticket, *, escalation: bool = False) -> QuerySet[Any]:
    """The approvers who decide `ticket` (OPS-6's recipients): every approver, or the
    approver groups' members; with `escalation`, the escalation group's members."""
    configuration = ticket.run.configuration
    if escalation:
        if configuration.escalation_group_id is None:
            return approvers().none()
        return approvers().filter(groups=configuration.escalation_group_id)
    groups = configuration.approver_groups.values("pk")
    if not groups.exists():
        return approvers()
    return approvers().filter(groups__in=groups).distinct()


def with_access(tickets: QuerySet[Ticket], user: Any) -> QuerySet[Ticket]:
    """Each ticket annotated with why `user` sees it (`access`): the first route that
    reaches them, else that the run is theirs."""
    whens = []
    if is_approver(user):
        whens = [When(route, then=Value(word)) for word, route in _routes(user, timezone.now())]
    return tickets.annotate(access=Case(*whens, default=Value(INITIATOR)))


# HITL-8: four-eyes. Under `require_second_approver` the initiator's *allow* (never a
# deny, never an answer) is refused with `self_approval`.


@dataclass(frozen=True)
class FourEyes:
    applies: bool  # the run's configuration needs a second approver
    blocks: bool  # ...and this user started the run: their Approve is not theirs to press
    explanation: str  # why, for the card and the admin's ticket page ("" when it does not apply)


def _barred(run: Run) -> int | None:
    """The one person whose allow on `run` does not count: its initiator, under four-eyes."""
    return run.created_by_id if run.configuration.require_second_approver else None


def four_eyes(user: Any, run: Run) -> FourEyes:
    if not run.configuration.require_second_approver:
        return FourEyes(applies=False, blocks=False, explanation="")
    if user.is_authenticated and _barred(run) == user.pk:
        why = (
            "you started this run, and its configuration needs a second person to approve "
            "its tool calls. Another approver must press Approve; you may still deny."
        )
        return FourEyes(applies=True, blocks=True, explanation=why)
    initiator = run.created_by.get_username() if run.created_by else "the initiator"
    why = f"{initiator} started this run and may not approve it; you can."
    return FourEyes(applies=True, blocks=False, explanation=why)


def four_eyes_counted(run: Run) -> Q:
    """`four_eyes` as a filter of a ticket's allows (`TicketApproval` rows): those that
    count, never the initiator's under four-eyes, even one given before it was switched
    on."""
    barred = _barred(run)
    return Q() if barred is None else ~Q(user_id=barred)


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


def recipients(ticket: Ticket, approver_emails: set[str], *, escalation: bool = False) -> list[str]:
    """The addresses to tell of `ticket`, given every approver's (fetched once per pass);
    a routed or escalated ticket asks `deciders` for its own (HITL-14, HITL-15); a timer
    (SCHED-3) and a delegation (DEL-1) are nobody's to answer."""
    if not may_answer_some(ticket):
        return []
    configuration = ticket.run.configuration
    if escalation or configuration.approver_groups.exists():
        found = deciders(ticket, escalation=escalation).exclude(email="")
        emails = set(found.values_list("email", flat=True))
    else:
        emails = set(approver_emails)
    initiator = ticket.run.created_by
    if ticket.answer == Ticket.Answer.INPUT and initiator and initiator.email and not escalation:
        emails.add(initiator.email)
    return sorted(emails)


# OPS-3, OPS-5: operating. Metrics are for staff (or the scraper's bearer token, checked
# where the token arrives); the audit export for staff holding `view_audit`.


def may_see_metrics(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff)


def may_export_audit(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff and user.has_perm(VIEW_AUDIT))


# SCHED-2, SCHED-4: the system starts runs on a person's behalf only while that person may
# still start them; asked at each firing, never once at set-up.


def may_act_as(owner: Any) -> str | None:
    """Why `owner` may not start a run now (a sentence for the skip), or None."""
    if owner is None:
        return "the owner no longer exists"
    if not owner.is_active:
        return f"the owner {owner.get_username()} is deactivated"
    return None


# GOV-3: who decides a held catalog change, and what of it they may read.
APPROVE_CHANGE = "agentruns.approve_change"
# A source's text is shown only to whoever may view that kind of record.
PRIVATE_TEXT = {
    "snippet": ("text", "agentruns.view_snippet"),
    "skill": ("instructions", "agentruns.view_skill"),
}
WITHHELD_TEXT = "(text not shown: you may not view this record's text)"


def may_decide_changes(user: Any) -> bool:
    return bool(user.is_authenticated and user.is_staff and user.has_perm(APPROVE_CHANGE))


def pending_changes(user: Any) -> QuerySet[ChangeRequest]:
    """GOV-3: the held changes an inbox shows: every pending one, to those who decide
    changes (their own too, with why Approve is not theirs to press)."""
    pending = ChangeRequest.objects.filter(status=ChangeRequest.Status.PENDING)
    return pending if may_decide_changes(user) else pending.none()


def decidable_changes(user: Any) -> QuerySet[ChangeRequest]:
    """GOV-3: those of them `user` may decide: not their own (`self_approval`)."""
    return pending_changes(user).exclude(requested_by=user)


def visible_changes(user: Any, kind: str, changes: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A change request's {field: [old, new]} as `user` may read it."""
    private = PRIVATE_TEXT.get(kind)
    if private is None or private[0] not in changes or user.has_perm(private[1]):
        return changes
    return {**changes, private[0]: [WITHHELD_TEXT, WITHHELD_TEXT]}
