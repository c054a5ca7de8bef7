"""GOV-4 on a page: replay ended runs on a candidate configuration and read the table of
what changed, through the services the API uses. Staff with `use_playground` only.

`/replays/` lists the viewer's replays and holds the form (a plain POST: run ids and the
candidate; `?runs=1,2,3` fills the ids, as the runs list's link does, and
`?configuration=<slug>` picks the candidate, as the admin's configuration page does);
`/replays/<id>/` is the table, which reloads itself while the replay runs (and says so
without JavaScript).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from agentruns.errors import AgentrunsError
from agentruns.models import Run
from agentruns.policy import may_use_playground
from agentruns.selectors import preselected
from agentruns.services.replays import (
    MAX_RUNS,
    REFUSED,
    replay_get,
    replay_start,
    replay_table,
    replays_of,
)
from agentruns.services.usage import Usage
from agentruns.throttles import SUBMIT, throttle_check
from agentruns.words import field_errors, sentence
from playground.runs import start_choices

IDS = re.compile(r"[\s,]+")


def _playground(request: HttpRequest) -> None:
    if not may_use_playground(request.user):
        raise PermissionDenied


def run_ids(text: str) -> list[int] | None:
    """`12, 13 14` as ids; None when something else is in it."""
    words = [word for word in IDS.split(text.strip()) if word]
    if not all(word.isdecimal() and len(word) < 19 for word in words):
        return None
    return [int(word) for word in words]


@login_required
def replays(request: HttpRequest) -> HttpResponse:
    _playground(request)
    if request.method == "POST":
        return _start(request)
    runs = request.GET.get("runs", "")
    choices = start_choices()
    return render(
        request,
        "playground/replays.html",
        {
            "replays": [_counted(replay_table(replay)) for replay in replays_of(request.user)],
            "runs": ", ".join(str(pk) for pk in (run_ids(runs) or [])),
            "choices": choices,
            # UI-7: like the playground and "Start a run", one that works offline.
            "candidate": request.GET.get("configuration") or preselected(choices),
            "max_runs": MAX_RUNS,
        },
    )


def _counted(table: dict[str, Any]) -> dict[str, Any]:
    """The list's summary of a table: how many replies changed, how many sends refused."""
    rows = table["results"]
    table["changed"] = sum(1 for row in rows if row["final_reply_changed"])
    table["refused"] = sum(1 for row in rows if row["verdict"] == REFUSED)
    return table


def _start(request: HttpRequest) -> HttpResponse:
    ids = run_ids(request.POST.get("runs", ""))
    if ids is None:
        messages.error(request, "Give the runs as ids separated by commas or spaces.")
        return redirect("playground:replays")
    try:
        throttle_check(request, SUBMIT)  # SEC-14: a replay is submissions
        replay = replay_start(
            user=request.user, runs=ids, configuration=request.POST.get("configuration", "")
        )
    except AgentrunsError as error:
        problems = [m for msgs in field_errors(error).values() for m in msgs]
        messages.error(request, " ".join([sentence(error), *problems]))
        return redirect("playground:replays")
    count = len(ids)
    messages.success(
        request, f"Replay #{replay.pk} started: {count} run{'s' if count != 1 else ''}."
    )
    return redirect("playground:replay", replay_id=replay.pk)


@login_required
def replay(request: HttpRequest, replay_id: int) -> HttpResponse:
    _playground(request)
    try:
        found = replay_get(user=request.user, replay_id=replay_id)
    except AgentrunsError as error:
        raise Http404(sentence(error)) from error
    table = replay_table(found)
    for row in table["results"]:
        row["ended"] = row["status"] in Run.TERMINAL  # what changed is known only then
        # OPS-1: each cost as people read it ("not priced" without prices).
        row["cost_text"] = _cost_text(row["usage"])
        if row["original_usage"]:
            row["original_cost"] = _cost_text(row["original_usage"])
    return render(request, "playground/replay.html", {"replay": table})


def _cost_text(usage: dict[str, Any]) -> str:
    return Usage(cost=Decimal(usage["cost"]), has_prices=usage["priced"]).cost_text
