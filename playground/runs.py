"""The runs a viewer may see (SEC-2) and one run's page, both live without reload (UI-2,
UI-3, UI-7).

htmx polls the runs table every two seconds (204 while it is unchanged) and the live part
of a run page every second; once the run has ended that answer is HTTP 286 and the
fragment carries no trigger, so polling stops either way. The polls are endpoints of their
own (`playground.polls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from agentruns import events as ev
from agentruns.errors import AgentrunsError
from agentruns.models import Configuration, Event, Run, Ticket
from agentruns.policy import may_use_playground, visible_runs
from agentruns.selectors import (
    bounded_count,
    configuration_choices,
    run_readout,
    start_form,
    waiting_on,
)
from agentruns.services.fork import ForkRequest, run_fork
from agentruns.services.runs import Submission, run_submit
from agentruns.services.usage import run_usage
from agentruns.throttles import SUBMIT, throttle_check
from agentruns.words import failure_sentence, field_errors, sentence
from playground import timeline
from playground.polls import SIGNATURE, poll, signature, unchanged

PAGE_SIZE = 25
FORK_DEPTH = 20  # levels of forks of forks the runs list nests before it stops looking


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


class RunPaginator(Paginator):
    """Counted exactly up to a bound, estimated beyond it (PERF-8); `exact` says which."""

    @cached_property
    def _counted(self) -> tuple[int, bool]:
        return bounded_count(self.object_list)  # type: ignore[arg-type]  # a QuerySet here

    @cached_property
    def count(self) -> int:
        return self._counted[0]

    @property
    def exact(self) -> bool:
        return self._counted[1]


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    start = start_form(start_configurations(), slug=None, typed=None)
    context = _listed(request)
    context.update(
        choices=start.choices,
        preselected=start.configuration.slug if start.configuration else "",
        task=start.task,
        statuses=Run.Status.values,
        configurations=Configuration.objects.order_by("slug").values_list("slug", flat=True),
        # GOV-4: the page's ended runs, for its "Replay these runs" link.
        ended=[run.pk for run, _ in context["rows"] if run.is_terminal],
    )
    return render(request, "playground/runs.html", context)


@poll
def run_list_live(request: HttpRequest) -> HttpResponse:
    """The runs table, polled (UI-2, UI-7): 204 while the page it shows is unchanged."""
    context = _listed(request)
    if unchanged(request, context["signature"]):
        return HttpResponse(status=204)
    return render(request, "playground/_runs_table.html", context)


def _listed(request: HttpRequest) -> dict[str, Any]:
    """One page of the runs the viewer may see, filtered as asked, and what its poll
    compares: the page's runs and their statuses, and how many there are."""
    # GOV-4: a replay's runs are its table's (the replays page), not the viewer's work.
    runs = visible_runs(request.user).filter(replay__isnull=True).order_by("-created_at", "-id")
    status = request.GET.get("status", "")
    if status in Run.Status.values:
        runs = runs.filter(status=status)
    configuration = request.GET.get("configuration", "")
    if configuration:
        runs = runs.filter(configuration__slug=configuration)
    runs = runs.select_related("configuration", "created_by")
    # FORK-2: a fork is listed under its original (when the list shows that too), so a
    # page holds originals; a per-row primary-key probe keeps PERF-8's index order.
    roots = runs.filter(
        Q(forked_from__isnull=True) | ~Exists(runs.filter(pk=OuterRef("forked_from_id")))
    )
    page = RunPaginator(roots, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = _with_forks(list(page.object_list), runs)
    shown = signature([page.paginator.count, *(f"{r.pk}:{r.status}" for r, _ in rows)])
    query = request.GET.copy()
    for name in ("page", SIGNATURE):
        query.pop(name, None)
    polled = request.GET.copy()
    polled[SIGNATURE] = shown
    return {
        "page": page,
        "rows": rows,
        "status": status,
        "configuration": configuration,
        "query": query.urlencode(),
        "signature": shown,
        "poll_url": f"{reverse('playground:runs-live')}?{polled.urlencode()}",
    }


def _with_forks(originals: list[Run], runs: Any) -> list[tuple[Run, int]]:
    """Each run of the page followed by its forks, theirs under them, as (run, depth)."""
    children: dict[int, list[Run]] = {}
    level = [run.pk for run in originals]
    for _ in range(FORK_DEPTH):
        forks = list(runs.filter(forked_from__in=level).order_by("id")) if level else []
        for fork in forks:
            children.setdefault(fork.forked_from_id, []).append(fork)
        level = [fork.pk for fork in forks]
    rows: list[tuple[Run, int]] = []

    def visit(run: Run, depth: int) -> None:
        rows.append((run, depth))
        for fork in children.get(run.pk, []):
            visit(fork, depth + 1)

    for run in originals:
        visit(run, 0)
    return rows


@login_required
@require_POST
def run_start(request: HttpRequest) -> HttpResponse:
    """Anyone signed in may start a plain run: no forced sources, no dry run (FS-5)."""
    submission = Submission(
        configuration=request.POST.get("configuration", ""), input=request.POST.get("task", "")
    )
    try:
        throttle_check(request, SUBMIT)  # SEC-14: the API's rate, the same counter
        run, _ = run_submit(user=request.user, submission=submission)
    except AgentrunsError as error:
        problems = [m for msgs in field_errors(error).values() for m in msgs]
        messages.error(request, " ".join([sentence(error), *problems]))
        return redirect("playground:runs")
    messages.success(request, f"Run #{run.pk} started.")
    return redirect("playground:run", run_id=run.pk)


@login_required
@require_POST
def run_start_task(request: HttpRequest) -> HttpResponse:
    """*Start a run*'s task box for the configuration now selected (UI-7, as the
    playground's): htmx posts the form as the select changes (the task is no URL's
    business)."""
    start = start_form(
        start_configurations(),
        slug=request.POST.get("configuration"),
        typed=request.POST.get("task"),
    )
    return render(request, "playground/_start_task.html", {"task": start.task})


@login_required
@require_POST
def run_fork_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """FORK-2: "Fork from here" on a model turn, through the API's service (FORK-1). The
    fork opens where the form was: the inspector for those who may use it, else its page."""
    at = request.POST.get("at", "")
    fork_request = ForkRequest(
        at=int(at) if at.isdecimal() else None,
        configuration=request.POST.get("configuration") or None,
        input=request.POST.get("input", ""),
    )
    inspector = request.POST.get("view") == "inspector" and may_use_playground(request.user)
    try:
        throttle_check(request, SUBMIT)  # SEC-14: a fork is a submission
        fork = run_fork(user=request.user, run_id=run_id, request=fork_request)
    except AgentrunsError as error:
        problems = [m for msgs in field_errors(error).values() for m in msgs]
        messages.error(request, " ".join([sentence(error), *problems]))
        return redirect("playground:inspector" if inspector else "playground:run", run_id=run_id)
    messages.success(request, f"Run #{fork.pk} forked from run #{run_id}.")
    return redirect("playground:inspector" if inspector else "playground:run", run_id=fork.pk)


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(visible_runs(request.user), pk=run_id)
    context = live_context(run, viewer=request.user)
    context["readout"] = run_readout(run)
    context["forks"] = visible_forks(request.user, run)
    return render(request, "playground/run.html", context)


@poll
def run_live(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(visible_runs(request.user), pk=run_id)
    context = live_context(run, viewer=request.user)
    return live_response(request, "playground/_run_live.html", run, context)


def live_response(
    request: HttpRequest, template: str, run: Run, context: dict[str, Any]
) -> HttpResponse:
    """The polled fragment; 286 tells htmx to stop once the run has ended."""
    response = render(request, template, context)
    return HttpResponseStopPolling(response.content) if run.is_terminal else response


def live_context(run: Run, *, viewer: Any = None) -> dict[str, Any]:
    """What changes while a run goes: status, reply, failure, ticket, counters, usage and
    cost (OPS-1: as the run API reports them), log; for a `viewer`, the delegation tree
    the run is part of (DEL-5)."""
    events = list(Event.objects.filter(run=run).order_by("sequence"))
    # HITL-1: one ticket a person answers; DEL-1: or one per sibling the run waits for.
    tickets = list(Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).order_by("id"))
    counts: dict[str, int] = {}
    for event in events:
        counts[event.type] = counts.get(event.type, 0) + 1
    return {
        "run": run,
        "live": not run.is_terminal,
        "start_choices": start_choices(),
        "failure": failure_sentence(run.failure) if run.failure else "",
        "ticket": tickets[0] if tickets else None,
        "waiting_for": waiting_on(run),
        "counters": {
            "events": len(events),
            "model turns": counts.get(ev.ASSISTANT, 0),
            "tool results": counts.get(ev.TOOL_RESULT, 0),
            "tool calls": tool_call_budget(run, events),
            "attempts": run.attempts,
        },
        "usage": run_usage(run),
        "redactions": [ev.parse(e.type, e.payload) for e in events if e.type == ev.SECRET_REDACTED],
        "rows": timeline.timeline(run, events),
        "time": timeline.time_split(run, events, timezone.now()),
        "events": events,
        "tree": delegation_tree(viewer, run, events) if viewer is not None else [],
    }


def tool_call_budget(run: Run, events: list[Event]) -> str:
    """LOOP-6 in words that agree with the timeline: the budget counts the calls granted
    (a delegated tree's included) and never a refused one, so those are named beside it."""
    results = [ev.parse(e.type, e.payload) for e in events if e.type == ev.TOOL_RESULT]
    refused = len([r for r in results if isinstance(r, ev.ToolResult) and r.status == ev.REFUSED])
    granted = f"{run.tool_calls_used} of {run.configuration.max_tool_calls} granted"
    return f"{granted}, {refused} refused" if refused else granted


@dataclass
class TreeNode:
    """DEL-5: a run of a delegation tree and the children it delegated to, oldest first."""

    run: Run
    children: list[TreeNode] = field(default_factory=list)


def delegation_tree(viewer: Any, run: Run, events: list[Event]) -> list[TreeNode]:
    """DEL-5: the whole tree `run` belongs to, from its root, as far as the viewer may see
    it (a run whose parent they may not see is a top of its own). A run that neither was
    delegated nor delegated anything, as its own log says, costs no query."""
    delegated = any(e.type == ev.TICKET_OPENED and e.payload.get("child") for e in events)
    if not (run.parent_id or delegated):
        return []
    root = run.root_id or run.pk
    rows = visible_runs(viewer).filter(Q(pk=root) | Q(root_id=root))
    nodes = {r.pk: TreeNode(r) for r in rows.select_related("configuration").order_by("id")}
    tops: list[TreeNode] = []
    for node in nodes.values():
        parent = nodes.get(node.run.parent_id) if node.run.parent_id else None
        (parent.children if parent else tops).append(node)
    return tops


def start_configurations() -> list[Configuration]:
    """The configurations a run may start on, a fork's included (FORK-2): active ones."""
    return list(
        Configuration.objects.filter(active=True).select_related("provider").order_by("slug")
    )


def start_choices() -> list[Any]:
    return configuration_choices(start_configurations())


def visible_forks(user: Any, run: Run) -> list[Run]:
    """FORK-2: the forks of `run` the viewer may see, oldest first."""
    return list(visible_runs(user).filter(forked_from=run).order_by("id"))


def visible_children(user: Any, run: Run) -> list[Run]:
    """DEL-5: the child runs `run` delegated to, oldest first, with their configurations."""
    children = visible_runs(user).filter(parent=run).select_related("configuration")
    return list(children.order_by("id"))
