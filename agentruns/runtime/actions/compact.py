"""Compaction (DEF-6): summarise the oldest units when the context outgrows its budget;
nothing over the budget is ever sent."""

from __future__ import annotations

import logging

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.providers.base import ProviderRequest, ToolSpec, UserMessage
from agentruns.providers.tokens import (
    fixed_tokens,
    message_bytes,
    message_tokens,
    truncate_tokens,
)
from agentruns.runtime import compaction
from agentruns.runtime.actions.base import Measure, Outcome, RunContext
from agentruns.runtime.actions.endings import finish_failed
from agentruns.runtime.actions.send import Sent, send
from agentruns.runtime.compose import summarised_results
from agentruns.runtime.context import project
from agentruns.runtime.redaction import redact

logger = logging.getLogger(__name__)


SUMMARY_INSTRUCTION = (
    "Summarise the conversation below for your own later use: the user's goals, decisions, "
    "facts and tool results that still matter. Be concise; do not invent anything."
)


def _event_tokens(ctx: RunContext, event: LogEntry, measure: Measure = message_tokens) -> int:
    # MCP-4: a withheld result's note is shorter than the result.
    data = event.data
    withheld = isinstance(data, ev.ToolResult | ev.Compaction) and data.withheld
    key = (event.sequence, withheld, measure is message_tokens)
    memo = ctx.memos.tokens
    tokens = memo.get(key)
    if tokens is None:
        tokens = sum(measure(message) for message in project([event]))
        memo[key] = tokens
    return tokens


def _needed(ctx: RunContext, fixed: int, measure: Measure = message_tokens) -> int:
    """The next send's tokens by our own count (each event counted once per run): DEF-6's
    bound never rests on what a provider reports."""
    return fixed + ctx.view_total(measure, lambda event: _event_tokens(ctx, event, measure))


def compact_if_needed(
    ctx: RunContext, system: list[str], specs: tuple[ToolSpec, ...]
) -> Outcome | None:
    budget = ctx.config.send_budget_tokens
    fixed = fixed_tokens(system, specs)
    # The usual case, no units to cut and no plan to make: a context that fits even at a
    # byte per token is never counted token by token (~30 us an event).
    if _needed(ctx, fixed, message_bytes) <= budget or _needed(ctx, fixed) <= budget:
        return None
    units = compaction.units_of(
        ctx.view().effective,
        lambda events: sum(_event_tokens(ctx, event) for event in events),
    )
    plan = compaction.plan(units, fixed=fixed, budget=budget)
    if plan is None:
        return _over_budget(ctx, fixed, budget)
    summarised = [event for unit in plan.summarised for event in unit.events]
    request = ProviderRequest(
        model=ctx.config.model,
        system=(SUMMARY_INSTRUCTION,),
        messages=(UserMessage(compaction.transcript(summarised)),),
        purpose="summary",
    )
    summarised_at = {event.sequence for event in summarised}
    withheld = [result for result in ctx.view().withheld if result.sequence in summarised_at]
    # CG-9: the summary is a send too, gated and audited like a turn (MCP-4).
    sent = send(ctx, request, composed_on=ctx.generation, withheld=withheld)
    if not isinstance(sent, Sent):
        return sent  # the run's end, or None: the turn is composed again (the catalog moved)
    reply = sent.reply
    summary = truncate_tokens(redact(reply.text)[0], plan.summary_allowance)
    compacted = ev.Compaction(
        summary=summary,
        kept_from=plan.kept_from,
        active_deferred=tuple(sorted(ctx.active_deferred())),
        summarised_events=len(summarised),
        # MCP-4: the summary keeps the classes of the results it stands for.
        results=summarised_results(summarised) or None,
        usage=reply.token_usage,  # OPS-1: the summary call is paid for too
        # CG-12: it restates the replies it summarised, so it carries their class.
        label=sent.label or None,
    )
    ctx.commit([compacted.item()], durable=False)
    return _over_budget(ctx, fixed, budget)


def _over_budget(ctx: RunContext, fixed: int, budget: int) -> Outcome | None:
    """DEF-6: nothing over the budget is ever sent, compacted or not."""
    needed = _needed(ctx, fixed)
    if needed <= budget:
        return None
    return finish_failed(
        ctx,
        "context_budget_exceeded",
        f"The context needs {needed} tokens even after compaction; the budget is {budget}.",
        fields={"needed": needed, "budget": budget},
    )
