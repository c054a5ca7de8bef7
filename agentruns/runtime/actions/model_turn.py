"""A model turn (LOOP-6, LOOP-7, CG-11): compose the request, compact the log if it
outgrew the budget, send the request (`send`: gated, down the fallback chain), record the
reply and judge each proposed call before any runs."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agentruns import events as ev
from agentruns.answers import schema_problems
from agentruns.gate.core import ResultSource, parse_label
from agentruns.models import Checkpoint, Run, ToolInvocation
from agentruns.providers.base import Link, ProviderRequest, Reply
from agentruns.runtime.actions.base import Outcome, RunContext
from agentruns.runtime.actions.compact import compact_if_needed
from agentruns.runtime.actions.endings import finish, finish_failed
from agentruns.runtime.actions.gating import sources
from agentruns.runtime.actions.send import Sent, send
from agentruns.runtime.budget import fit
from agentruns.runtime.compose import Composed, next_request
from agentruns.runtime.context import pairing_problems
from agentruns.runtime.effects import idempotency_key
from agentruns.runtime.redaction import redact, redact_value
from agentruns.runtime.state import ProposedCall
from agentruns.runtime.storable import storable_reply, unstorable_arguments
from agentruns.store import store
from agentruns.store.records import Rows
from agentruns.store.rows import NewInvocation
from agentruns.tools.policy import (
    needs_human,
    tool_refusal,
)
from agentruns.tools.registry import (
    REGISTRY,
    Human,
    digest,
)

logger = logging.getLogger(__name__)


@dataclass
class Screened:
    """What the loop decided about one proposed call before dispatch."""

    call: ProposedCall
    status: str | None = None  # a result status when the call will not run
    content: str = ""


def model_turn(ctx: RunContext, turn_index: int) -> Outcome | None:
    if turn_index >= settings.AGENTRUNS_MAX_TURNS:
        return finish_failed(
            ctx, "turn_limit", f"The model took {turn_index} turns without a final reply."
        )
    limit = ctx.config.daily_token_limit
    if store().daily_limit_reached(ctx.lease.configuration_id, limit, ctx.used_today):
        return finish_failed(
            ctx,
            "daily_limit_reached",
            f"The configuration used its {limit} tokens for today (UTC); nothing was sent.",
            fields={"limit": limit},
        )
    composed_on = ctx.generation
    composed = _composed(ctx)
    if composed.system_redacted and not ctx.state.system_redacted:
        ctx.commit(ev.redacted("system", composed.system_redacted))
    logged = len(ctx.events)
    stopped = compact_if_needed(ctx, list(composed.system), composed.specs)
    if stopped:
        return stopped
    if ctx.generation != composed_on:
        return None  # SEC-6: the catalog moved since the turn was composed: compose it again
    if len(ctx.events) != logged:  # compacted: send the log as it is now
        composed = _composed(ctx)
    problems = pairing_problems(composed.messages)
    if problems:
        return finish_failed(ctx, "corrupt_history", "; ".join(problems))
    request = ProviderRequest(
        model=ctx.config.model,
        system=composed.system,
        messages=composed.messages,
        tools=composed.specs,
        continuation=ctx.state.continuation,
        tools_spent=ctx.state.tool_calls_used >= ctx.tool_call_limit,
    )
    trace = ctx.trace
    span = trace.turn(ctx, turn_index, composed) if trace else None  # OPS-7
    withheld = ctx.view().withheld
    sent = send(ctx, request, composed_on=composed_on, withheld=withheld)
    if not isinstance(sent, Sent):
        if trace:
            trace.turn_done(ctx, span, None, None)
        return sent  # the run's end, or None: compose the turn again
    reply, link = sent.reply, sent.link
    if trace:
        trace.turn_done(ctx, span, reply, link, parse_label(sent.label))
    continuation = {"link": link.slug, "data": reply.continuation} if reply.continuation else None
    served_by = ev.ServedBy(link.slug, link.provider_slug, reply.model)
    offered = {t.name for t in composed.tools}
    sent_under = sent_record(ctx, link, composed, withheld)
    return _record_turn(
        ctx, turn_index, reply, offered, continuation, served_by, sent_under, sent.label
    )


def sent_record(
    ctx: RunContext, link: Link, composed: Composed, withheld: Sequence[ResultSource]
) -> ev.SentRecord:
    """GOV-2: what this turn was sent under, kept in its `message.assistant` so pages show
    it as it was, never recomposed from today's catalog: the versions of the configuration,
    the provider that answered and each source carried, the zone and ceiling the gate
    judged, and the results it withheld."""
    view = ctx.config.view
    return ev.SentRecord(
        configuration_version=view.primary.version,
        link_version=link.version,
        provider_version=link.provider_version,
        zone=link.zone.label,
        ceiling=ctx.config.ceiling.label,
        sources={f"{s.kind}:{s.name}": s.version for s in composed.sources if s.version},
        withheld=tuple(result.sequence for result in withheld),
    )


def _composed(ctx: RunContext) -> Composed:
    return next_request(ctx.view(), sources=sources(ctx), messages=ctx.messages())


def _record_turn(
    ctx: RunContext,
    turn_index: int,
    reply: Reply,
    offered: set[str],
    continuation: Any = None,
    served_by: ev.ServedBy | None = None,
    sent_under: ev.SentRecord | None = None,
    label: dict[str, Any] | None = None,
) -> Outcome | None:
    reply, unstorable = storable_reply(reply)  # SEC-7: before any of it is stored
    text, redacted = redact(reply.text)
    calls = [_call_from(tool_call, redacted) for tool_call in reply.tool_calls]
    reused = _reused_call_ids(ctx, calls)
    if reused:
        return finish_failed(
            ctx,
            "corrupt_history",
            f"The model reused call ids {', '.join(sorted(reused))}; a history pairing "
            "them cannot exist, so nothing was run.",
        )
    redaction = ev.redacted("model_reply", redacted)
    verdicts, granted = _granted(ctx, calls, offered, unstorable) if calls else ([], [])
    turn = ev.AssistantMessage(
        text=text,
        tool_calls=tuple(calls),
        turn_index=turn_index,
        tool_calls_before=ctx.state.tool_calls_used,
        served_by=served_by,  # LOOP-3: which link of the chain answered (TZ-5)
        usage=reply.token_usage,  # OPS-1
        sent=sent_under,  # GOV-2
        # CG-12: its text and its calls' arguments carry the class of what it read
        label=label or None,
        granted=tuple(granted),
    )
    if not calls:
        return finish(ctx, Run.Status.COMPLETED, [*redaction, turn.item()], final_reply=text)
    refusals = [
        ev.result_item(v.call.id, v.call.name, v.status, v.content)
        for v in verdicts
        if v.status is not None
    ]
    authorised = [_new_invocation(ctx, turn_index, c) for c in calls if c.id in granted]
    ctx.commit(
        [*redaction, turn.item(), *refusals],
        checkpoints=(
            (Checkpoint.Kind.MODEL_RESPONSE, len(redaction) + 1),
            (Checkpoint.Kind.TOOL_PENDING, None),
        ),
        continuation=continuation,
        rows=Rows(new_invocations=authorised),
        durable=False,
    )
    return None


def _granted(
    ctx: RunContext,
    calls: list[ProposedCall],
    offered: set[str],
    unstorable: dict[str, set[str]],
) -> tuple[list[Screened], list[str]]:
    """Each call judged, and the ids of those that may run: the first in model order
    within the tool budget (LOOP-6); the rest are refused with the reason."""
    verdicts = [_judge(ctx, call, offered, unstorable.get(call.id)) for call in calls]
    candidates = [v.call.id for v in verdicts if v.status is None]
    limit = ctx.tool_call_limit
    granted, over = fit(candidates, used_before=ctx.state.tool_calls_used, limit=limit)
    for verdict in verdicts:
        if verdict.call.id in over:
            verdict.status = ev.REFUSED
            verdict.content = (
                f"Refused: the tool budget of {limit} calls for this "
                "run is used up. Answer with what you have."
            )
    return verdicts, granted


def _call_from(tool_call: Any, found: dict[str, int]) -> ProposedCall:
    """The registry name, and arguments redacted like any text (CG-11)."""
    tool = REGISTRY.by_wire(tool_call.name)
    arguments, kinds = redact_value(tool_call.arguments)
    raw, raw_kinds = redact(tool_call.raw_arguments or "")
    for kind, count in (*kinds.items(), *raw_kinds.items()):
        found[kind] = found.get(kind, 0) + count
    return ProposedCall(
        id=tool_call.id,
        name=tool.name if tool else tool_call.name,
        arguments=arguments,
        raw_arguments=raw if tool_call.raw_arguments is not None else None,
    )


def _reused_call_ids(ctx: RunContext, calls: list[ProposedCall]) -> set[str]:
    """Call ids pair calls with results (LOOP-7): one reused inside a turn or from the
    thread's history would break the pairing, so such a turn is never acted on."""
    ids = [call.id for call in calls]
    reused = {call_id for call_id in ids if ids.count(call_id) > 1}
    return reused | (set(ids) & _earlier_call_ids(ctx))


def _earlier_call_ids(ctx: RunContext) -> set[str]:
    """Every call id the thread's model turns proposed, each event read once per run
    rather than the whole log once per turn."""
    read, seen = ctx.memos.call_ids
    for event in ctx.events[read:]:
        if isinstance(turn := event.data, ev.AssistantMessage):
            seen.update(call.id for call in turn.tool_calls)
    ctx.memos.call_ids = (len(ctx.events), seen)
    return seen


def _judge(
    ctx: RunContext, call: ProposedCall, offered: set[str], unstorable: set[str] | None
) -> Screened:
    """TOOL-2 and argument validation; a bad proposal becomes a model-visible result."""
    if unstorable:
        return Screened(call, ev.ERROR, unstorable_arguments(unstorable))
    if call.arguments is None:
        return Screened(call, ev.ERROR, "Error: the arguments are not a JSON object.")
    refusal = tool_refusal(call.name, granted=ctx.config.granted, ceiling=ctx.config.ceiling)
    if refusal:
        return Screened(call, ev.REFUSED, f"Refused: {refusal[1]}")
    if call.name not in offered:
        if call.name in ctx.mode.deferred:
            return Screened(
                call,
                ev.REFUSED,
                f"Refused: {call.name!r} is not available yet; use tool_search to activate it.",
            )
        return Screened(call, ev.REFUSED, f"Refused: {call.name!r} is not offered in this mode.")
    tool = REGISTRY.get(call.name)
    assert tool is not None
    errors = tool.argument_errors(call.arguments)
    if not errors and tool.human is Human.INPUT:
        errors = schema_problems(call.arguments.get("schema"))
    if errors:
        return Screened(call, ev.ERROR, "Error: invalid arguments: " + "; ".join(errors))
    return Screened(call)


def _new_invocation(ctx: RunContext, turn_index: int, call: ProposedCall) -> NewInvocation:
    tool = REGISTRY.get(call.name)
    assert tool is not None and call.arguments is not None
    human = needs_human(tool, ctx.config.exempt)
    arguments_digest = digest(call.arguments)
    return NewInvocation(
        run_id=ctx.lease.run_id,
        turn_index=turn_index,
        call_id=call.id,
        tool=call.name,
        tool_version=tool.version,
        arguments=call.arguments,
        arguments_digest=arguments_digest,
        idempotency_key=idempotency_key(
            ctx.lease.run_id, turn_index, call, tool, arguments_digest=arguments_digest
        ),
        status=(
            ToolInvocation.Status.AWAITING_APPROVAL if human else ToolInvocation.Status.AUTHORISED
        ),
    )
