"""Read-side queries shared by the admin, the pages and the API."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from agentruns.gate.audit import current_enforcement
from agentruns.gate.core import ConfigView, Source, compose_sources
from agentruns.gate.lookups import (
    config_view,
    config_views,
    forced_for_composition,
    forced_for_resume,
)
from agentruns.gate.readout import readout
from agentruns.models import Configuration, Event, Run, Thread, Ticket, ToolInvocation
from agentruns.store import store


def configuration_readout(
    *,
    configuration: Configuration,
    forced_snippet_ids: Iterable[int] | None = None,
    forced_skill_ids: Iterable[int] | None = None,
) -> dict:
    """CG-10 for a configuration, optionally with a forced set composed as a run would."""
    view = config_view(configuration)
    snippets, skills, dropped = forced_for_composition(forced_snippet_ids, forced_skill_ids)
    data = readout(view, compose_sources(view, snippets, skills), current_enforcement())
    data["dropped"] = [item.as_dict() for item in dropped]
    return data


def run_sources(run: Run) -> tuple[ConfigView, list[Source]]:
    """The live configuration and the sources a run's next send carries (RG-2)."""
    view = config_view(run.configuration)
    return view, _sources(view, run)


def _sources(view: ConfigView, run: Run) -> list[Source]:
    snippets, skills = forced_for_resume(run.forced_snippet_ids, run.forced_skill_ids)
    return list(compose_sources(view, snippets, skills))


def run_readout(run: Run) -> dict[str, Any]:
    """CG-10 for a run: the live configuration plus the run's forced set (RG-2)."""
    return run_readouts([run])[run.pk]


def run_readouts(runs: Iterable[Run]) -> dict[int, dict[str, Any]]:
    """`run_readout` of each run (by id), the configurations read in 3 queries together
    (PERF-8: the inbox shows a readout on every card)."""
    runs = list(runs)
    views = config_views(run.configuration for run in runs)
    enforcement = current_enforcement()
    out = {}
    for run in runs:
        view = views[run.configuration_id]
        out[run.pk] = readout(view, _sources(view, run), enforcement)
    return out


def may_use_playground(user: Any) -> bool:
    """FS-5: the playground, and what it does anywhere (forcing sources, dry runs), is for
    staff holding `agentruns.use_playground`."""
    return bool(
        user.is_authenticated and user.is_staff and user.has_perm("agentruns.use_playground")
    )


def sees_all_runs(user: Any) -> bool:
    return bool(
        user.is_authenticated
        and (user.has_perm("agentruns.view_all_runs") or user.has_perm("agentruns.approve_run"))
    )


def visible_runs(user: Any) -> QuerySet[Run]:
    """SEC-2: a user sees the runs they started, unless they may see all."""
    runs = Run.objects.select_related("configuration", "thread", "created_by")
    if sees_all_runs(user):
        return runs
    if not user.is_authenticated:
        return runs.none()
    return runs.filter(created_by=user)


EXACT_COUNT_UP_TO = 10_000


def bounded_count(rows: QuerySet) -> tuple[int, bool]:
    """(how many rows a list has, whether that is exact) for its pagination: exact up to
    EXACT_COUNT_UP_TO, the planner's estimate beyond (PERF-8: counting a year's million
    runs costs more than showing a page of them)."""
    rows = rows.order_by()
    exact = rows[: EXACT_COUNT_UP_TO + 1].count()
    if exact <= EXACT_COUNT_UP_TO:
        return exact, True
    if connection.vendor != "postgresql":
        return rows.count(), True
    plan = json.loads(rows.explain(format="json"))
    return max(exact, int(plan[0]["Plan"]["Plan Rows"])), False


def can_act_on_thread(user: Any, thread: Thread) -> bool:
    """The thread's initiator, or an approver, may steer it (switch its mode)."""
    return bool(
        user.is_authenticated
        and (thread.created_by_id == user.pk or user.has_perm("agentruns.approve_run"))
    )


def can_act_on_run(user: Any, run: Run) -> bool:
    """The initiator, or an approver, may cancel or answer a run."""
    return bool(
        user.is_authenticated
        and (run.created_by_id == user.pk or user.has_perm("agentruns.approve_run"))
    )


def durable_events(*, run: Run, after: int, limit: int) -> list[Event]:
    """The run's events after the cursor, made durable before a client may advance it.

    A step may commit with `synchronous_commit=off` (runtime/journal.py): a database crash
    can then lose a tail a client has already read, and the lost sequence numbers are
    reused for different events, which an `?after=` cursor would skip.
    """
    rows = list(Event.objects.filter(run=run, sequence__gt=after).order_by("sequence")[:limit])
    if rows:
        store().make_durable()
    return rows


def actionable_tickets(user: Any) -> QuerySet[Ticket]:
    """HITL-9: the active tickets this user may answer, soonest deadline first. The query
    form of `services.resume.may_answer`: an approver answers every ticket of the runs
    they see; anyone else only the questions (not the permissions) of their own runs."""
    if not user.is_authenticated:
        return Ticket.objects.none()
    tickets = (
        Ticket.objects.filter(status=Ticket.Status.ACTIVE, run__in=visible_runs(user))
        # The provider too: each card's readout names it (PERF-8: a query per card).
        .select_related("run", "run__configuration__provider", "run__created_by")
        .order_by("deadline", "id")
    )
    if user.has_perm("agentruns.approve_run"):
        return tickets
    return tickets.filter(run__created_by=user, kind=Ticket.Kind.REMOTE_INPUT)


def uncertain_invocations(user: Any) -> QuerySet[ToolInvocation]:
    """TOOL-4: writes whose outcome is unknown, shown to approvers and never re-run."""
    if not (user.is_authenticated and user.has_perm("agentruns.approve_run")):
        return ToolInvocation.objects.none()
    return (
        ToolInvocation.objects.filter(
            status=ToolInvocation.Status.UNCERTAIN, run__in=visible_runs(user)
        )
        .select_related("run", "run__configuration")
        .order_by("-effect_sent_at")[:200]
    )
