"""The context a send carries: forced sources composed once at the start (FS-4), the
sources of every send (CG-1, RG-1, RG-2) and the gate asserted before each (CG-4..CG-9)."""

from __future__ import annotations

import logging
import time

from django.utils import timezone

from agentruns import events as ev
from agentruns.errors import ContextRefused
from agentruns.gate.audit import context_assert
from agentruns.gate.core import Source, Verdict, compose_sources
from agentruns.gate.lookups import forced_for_composition
from agentruns.gate.readout import verdict_label
from agentruns.runtime.actions.base import Items, Outcome, RunContext
from agentruns.runtime.actions.endings import finish_failed
from agentruns.runtime.config import carried_sources, forced_sources
from agentruns.store import store
from agentruns.store.connection import connection_given_back
from agentruns.store.records import Rows
from agentruns.store.rows import RunUpdate

logger = logging.getLogger(__name__)

# SEC-6: how long the gate waits before each decision while the catalog keeps moving.
STABLE_VIEW_WAITS = (0.0, 0.01, 0.03, 0.1, 0.3)


def compose(ctx: RunContext) -> None:
    """FS-4: a starting run injects only active forced sources and says what it left.
    A run that forces nothing has nothing to compose, and nothing to record."""
    if not (ctx.forced_snippet_ids or ctx.forced_skill_ids):
        ctx.composed = True
        return
    snippets, skills, dropped = forced_for_composition(ctx.forced_snippet_ids, ctx.forced_skill_ids)
    ctx.forced_snippet_ids = tuple(s.id for s in snippets)
    ctx.forced_skill_ids = tuple(s.id for s in skills)
    items: Items = []
    if dropped:
        items.append(ev.SourcesDropped(tuple(d.as_dict() for d in dropped)).item())
    composed = RunUpdate(
        forced_snippet_ids=ctx.forced_snippet_ids,
        forced_skill_ids=ctx.forced_skill_ids,
        composed_at=timezone.now(),
    )
    ctx.commit(items, rows=Rows(run_update=composed), durable=False)
    ctx.composed = True


def sources(ctx: RunContext) -> tuple[Source, ...]:
    """CG-1 against the live configuration; the forced set and what a fork or a child
    carried by identity (RG-1, RG-2, FORK-1, DEL-2); a child's floor (DEL-2) and the
    labelled replies the send carries (CG-12)."""
    snippets, skills = forced_sources(ctx.forced_snippet_ids, ctx.forced_skill_ids, ctx.generation)
    carried = carried_sources(ctx.carried, ctx.generation)
    labelled = (*ctx.floor, *ctx.view().replies)
    return compose_sources(ctx.config.view, snippets, skills, carried, labelled)


def assert_context(ctx: RunContext) -> Outcome | None:
    """CG-4..CG-9: an audit row per assert (written with the step held before it),
    decided on the configuration as cached for the catalog generation this executor
    knows; the same statement reads the live generation, and a decision taken on a stale
    one is taken again. A refusal ends the run before anything is sent. SEC-6: a catalog
    that will not hold still for any decision fails the run closed; no verdict of an
    earlier view is ever used."""
    for wait in STABLE_VIEW_WAITS:
        if wait:
            with connection_given_back():
                time.sleep(wait)  # a bulk change is usually over within a moment
            ctx.generation = store().catalog_generation()
        known = ctx.generation
        try:
            asserted = context_assert(
                config=ctx.config.view,
                sources=sources(ctx),
                save=ctx.audit,
                run_id=ctx.lease.run_id,
            )
        except ContextRefused as refused:
            if refused.generation is not None and refused.generation != known:
                ctx.generation = refused.generation  # decided on a stale catalog
                continue
            if ctx.trace:
                ctx.trace.verdict = Verdict.REFUSED.value
            return finish_failed(
                ctx,
                "context_refused",
                refused.detail,
                fields=refused.fields,
                extra=[ev.ContextRefused(None, refused.detail, dict(refused.fields)).item()],
            )
        ctx.generation = asserted.generation
        ctx.decision = asserted.decision
        if asserted.generation == known:
            if ctx.trace:
                ctx.trace.verdict = verdict_label(asserted.decision.verdict, asserted.enforcement)
            if asserted.observed_refusal and not ctx.state.observed:
                ctx.commit([ev.ContextObserved("refused (observed)").item()])
            return None
    return unstable(ctx)


def unstable(ctx: RunContext) -> Outcome:
    """SEC-6: the catalog would not hold still for a decision; fail closed."""
    return finish_failed(
        ctx,
        "context_unstable",
        f"The catalog changed during each of {len(STABLE_VIEW_WAITS)} gate decisions, so "
        "no decision covered the configuration as it stood; nothing was sent.",
    )
