"""The one way the loop calls a provider (CG-9, LOOP-5, TZ-5, SEC-3). A model turn and a
compaction's summary both send through `send`, and nothing else imports the dispatcher
(an import-linter contract in pyproject.toml), so every provider call is gated by
construction, never by the order its caller remembered.

`send` asserts the gate against the live configuration; gives the pooled connection back
for the call; dispatches down the fallback chain; refuses a reply too large to keep; and
maps a failed call to the run's failure, with the provider error's own code, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentruns.classes import Enforcement
from agentruns.frozen import quick
from agentruns.gate.audit import current_enforcement, withheld_assert
from agentruns.gate.core import ResultSource, high_water
from agentruns.providers.base import Link, ProviderError, ProviderRequest, Reply
from agentruns.providers.dispatch import dispatch
from agentruns.runtime import faults
from agentruns.runtime.actions.base import Outcome, RunContext
from agentruns.runtime.actions.endings import boundary, finish_failed
from agentruns.runtime.actions.gating import STABLE_VIEW_WAITS, assert_context, unstable
from agentruns.store.connection import connection_given_back


@quick
@dataclass(frozen=True, slots=True)
class Sent:
    """A reply in memory, nothing of it committed yet, and the link that gave it; `label`
    is what the reply's event stores of the class of what the send carried (CG-12)."""

    reply: Reply
    link: Link
    label: dict[str, Any] | None = None


def send(
    ctx: RunContext,
    request: ProviderRequest,
    *,
    composed_on: int,
    withheld: Sequence[ResultSource] = (),
) -> Sent | Outcome | None:
    """The reply, or the run's end (a refusal, a failed call, an oversized reply). None
    when the gate found the catalog moved since the request was composed on generation
    `composed_on` (SEC-6: no decision covers an earlier view): compose it again.
    `withheld`: the results the request carries withheld (MCP-4), audited before it goes."""
    # HITL-11: the audit statement brings the cancel flag back too; a cancel that landed
    # while the turn's held results waited stops the run before anything is sent.
    refused = assert_context(ctx) or boundary(ctx)
    if refused:
        return refused
    if ctx.generation != composed_on:
        ctx.recomposed += 1  # as often as a decision is taken again, then fail closed
        return unstable(ctx) if ctx.recomposed >= len(STABLE_VIEW_WAITS) else None
    ctx.recomposed = 0
    if withheld:
        withheld_assert(
            config=ctx.config.view,
            results=withheld,
            zone=ctx.config.zone,
            save=ctx.audit,
            run_id=ctx.lease.run_id,
        )
    try:
        with connection_given_back():
            reply, link = dispatch(ctx.config.links, request)
    except ProviderError as exc:
        detail = f"Compaction failed: {exc}" if request.purpose == "summary" else str(exc)
        fields = {"status": exc.status, "retryable": exc.retryable}
        return finish_failed(ctx, exc.code, detail, fields=fields)
    faults.fault_point(faults.PROVIDER)
    limit = settings.AGENTRUNS_MAX_REPLY_BYTES
    if reply.size > limit:  # no real turn comes near it; nothing of a larger reply is kept
        return finish_failed(
            ctx,
            "provider_reply_too_large",
            f"The model's reply was {reply.size} characters; at most {limit} are accepted. "
            "Nothing of it was kept.",
            fields={"size": reply.size, "limit": limit},
        )
    return Sent(reply, link, _label(ctx, withheld))


def _label(ctx: RunContext, withheld: Sequence[ResultSource]) -> dict[str, Any] | None:
    """CG-12: the send's high-water mark — its deciding source or a result it carried
    (one withheld from it does not count, unless the gate only observes: CG-6) — as the
    reply's event stores it."""
    observing = current_enforcement() is Enforcement.OBSERVE
    held = set() if observing else {result.sequence for result in withheld}
    carried = [r for r in ctx.view().results if r.sequence not in held]
    source = ctx.decision.source if ctx.decision else None
    label = high_water(source, carried)
    return label.as_dict() if label else None
