"""Forking a run at a model turn (FORK-1): the one path the API and the pages use.

Rights: the caller must see the original (else it is a 404, SEC-2) and be allowed to start
the run the fork is, on the configuration it names (active, under its daily limit, OPS-2).
A fork keeps its original's forced sources — the copied transcript is what the model made
of them — so forking a run that forced sources is forcing them, which is the playground's
(FS-5: `use_playground`, else 403). The fork's sends are gated like any send (CG-9): its
own configuration's sources, the forced set and every source carried by each run whose
turns the copy holds (the original and the earlier runs of its thread, CG-13), by class;
a refusal ends the fork `failed` with `context_refused`, naming the source (CG-7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from agentruns import events as ev
from agentruns.errors import InvalidRequest, NotFound
from agentruns.models import Event, Run
from agentruns.policy import may_see_run
from agentruns.runtime.fork import BadForkPoint, plan_fork
from agentruns.runtime.redaction import redact
from agentruns.selectors import Prefix, prefix_sources
from agentruns.services.runs import (
    Opening,
    Submission,
    User,
    check_daily_limit,
    check_input,
    check_playground,
    run_open,
    startable_configuration,
)
from agentruns.store.log import log_entries


@dataclass(frozen=True)
class ForkRequest:
    """`at`: the sequence of a `message.assistant` of the run, None for its end;
    `configuration`: a slug, None for the original's; `input`: a new prompt, "" to go on
    with the original's."""

    at: int | None = None
    configuration: str | None = None
    input: str = ""


def run_fork(*, user: User, run_id: int, request: ForkRequest) -> Run:
    original = Run.objects.select_related("configuration").filter(pk=run_id).first()
    if original is None or not may_see_run(user, original):
        raise NotFound("No such run.")
    prompt = request.input if request.input.strip() else ""
    check_input(prompt, required=False)
    slug = request.configuration or original.configuration.slug
    check_playground(
        user,
        Submission(
            configuration=slug,
            input=prompt or original.input,
            forced_snippets=tuple(original.forced_snippet_ids or ()),
            forced_skills=tuple(original.forced_skill_ids or ()),
        ),
    )
    configuration = startable_configuration(slug)
    check_daily_limit(configuration)
    log = log_entries(Event.objects.filter(thread=original.thread_id))
    # CG-13: the copy is the thread's prefix up to the fork point, so it carries the text
    # of every run with an event there, not only the original's.
    upto = request.at or max((e.sequence for e in log if e.run_id == original.pk), default=0)
    carried = prefix_sources(Prefix(log, original, upto))
    try:
        plan = plan_fork(
            log,
            run_id=original.pk,
            at=request.at,
            new_prompt=bool(prompt),
            forked={
                "configuration": configuration.slug,
                "carried": carried.sources,
                "floor": carried.floor,  # DEL-2: a fork of a child is held to its floor
            },
        )
    except BadForkPoint as bad:
        raise InvalidRequest(str(bad), fields={"at": [str(bad)]}) from bad
    owner: Any = user if user.is_authenticated else None
    text, kinds = redact(prompt) if prompt else (original.input, {})
    opening: list[Opening] = [*plan.items, *((True, *i) for i in ev.redacted("input", kinds))]
    if prompt:
        opening.append((True, *ev.UserMessage(text).item()))
    with transaction.atomic():
        return run_open(
            owner=owner,
            configuration=configuration,
            thread=None,
            text=text,
            forced=(original.forced_snippet_ids or (), original.forced_skill_ids or ()),
            opening=lambda _new: opening,
            forked_from=original,
            forked_at=plan.at,
        )
