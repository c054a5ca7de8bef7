"""Delegation (DEL-1..DEL-3): the `agent.delegate` calls of a turn start their child runs
and park their parent on a `delegation` ticket each, in one transaction
(`endings.park_delegations`); each child's end answers its ticket (`runtime/handback.py`).

A child runs on a new thread of its delegate configuration, for its parent's initiator,
with the task as its input. Its log opens with `run.delegated`, which names the parent and
carries the parent's sources by identity (DEL-2, CG-13: the child's sends bind by their
classes as a fork's do, FORK-1) and its floor (the parent's effective class at the call,
DEL-2), the child's depth and its share of the tool calls its tree has left (DEL-3), so
the child reads all of it from its own log without a query."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.conf import settings

from agentruns import events as ev
from agentruns.gate.core import DELEGATED, REPLY
from agentruns.runtime.actions.base import RunContext
from agentruns.runtime.actions.gating import sources
from agentruns.runtime.state import ProposedCall
from agentruns.store.delegation import child_create, configuration_active


def depth_of(ctx: RunContext) -> int:
    parent = ctx.parent
    return parent.depth if parent else 0


def delegation_refusal(ctx: RunContext, call: ProposedCall) -> str:
    """Why this call may not start a child ("" when it may): DEL-1's delegates and an
    active configuration, DEL-3's depth."""
    slug = str((call.arguments or {}).get("configuration", ""))
    delegates = ctx.config.delegates
    if slug not in delegates:
        named = ", ".join(delegates) or "none"
        return f"{slug!r} is not one of this configuration's delegates ({named})"
    limit = settings.AGENTRUNS_MAX_DELEGATION_DEPTH
    if depth_of(ctx) + 1 > limit:
        return f"delegation may go {limit} runs deep, and this run is {depth_of(ctx)} deep"
    if not configuration_active(slug):
        return f"the configuration {slug!r} is not active"
    return ""


def budget_shares(ctx: RunContext, siblings: int) -> list[int]:
    """DEL-3: what is left of the tree's tool calls (the `agent.delegate` calls
    included), split between siblings that run at once, the first ones taking the
    remainder: together they can never spend more than their tree has left."""
    left = max(ctx.tool_call_limit - ctx.state.tool_calls_used, 0)
    share, extra = divmod(left, siblings)
    return [share + (1 if i < extra else 0) for i in range(siblings)]


def child_starter(
    ctx: RunContext, call: ProposedCall, budget: int, trace_parent: dict[str, str] | None = None
) -> Callable[[], int]:
    """What `park_delegations` calls inside its transaction, after the cancel check: the
    child run, queued with its wake-up, whose id its ticket names."""

    def start() -> int:
        arguments = call.arguments or {}
        slug = str(arguments["configuration"])
        return child_create(
            parent_id=ctx.lease.run_id,
            call_id=call.id,
            slug=slug,
            task=str(arguments["task"]),
            opening=replace(opening(ctx, call, slug, budget), trace_parent=trace_parent),
            label=proposer_label(ctx, call),
        )

    return start


def proposer_label(ctx: RunContext, call: ProposedCall) -> dict[str, Any] | None:
    """CG-12: the label of the reply that proposed `call` (its arguments are the child's
    task), read from the log, so a call run on a later drive finds it too. DEL-2: it is
    the child's floor, the parent's effective class at the call — the strictest of
    everything its model had read (sources, tool and MCP results, earlier replies, an
    earlier child's result, its own floor) and what set it; None when nothing was
    declared."""
    for event in reversed(ctx.events):
        data = event.data
        if isinstance(data, ev.AssistantMessage) and any(c.id == call.id for c in data.tool_calls):
            return data.label
    return None


def opening(ctx: RunContext, call: ProposedCall, slug: str, budget: int) -> ev.RunDelegated:
    """The `run.delegated` payload: the parent, the sources it carries (DEL-2), the depth
    and the child's share of the tree's tool calls (DEL-3)."""
    run_id = ctx.lease.run_id
    carried = [
        {"kind": s.kind, "id": s.id, "from": s.carried_from or run_id}
        for s in sources(ctx)
        if s.kind not in (REPLY, DELEGATED)  # bound by the floor's class instead
    ]
    return ev.RunDelegated(
        parent_run=run_id,
        parent_call_id=call.id,
        configuration=slug,
        carried=tuple(carried),
        depth=depth_of(ctx) + 1,
        tool_call_budget=budget,
        floor=proposer_label(ctx, call),
    )
