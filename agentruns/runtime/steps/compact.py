"""Compaction (DEF-6): summarise the oldest units when the context outgrows its budget;
nothing over the budget is ever sent."""

from __future__ import annotations

import logging

from agentruns import events as ev
from agentruns.providers.base import (
    ProviderError,
    ProviderRequest,
    ToolSpec,
    UserMessage,
)
from agentruns.providers.dispatch import dispatch
from agentruns.providers.tokens import fixed_tokens, message_tokens, truncate_tokens
from agentruns.runtime import compaction
from agentruns.runtime.context import effective_events, project
from agentruns.runtime.redaction import redact
from agentruns.runtime.state import (
    Ev,
)
from agentruns.runtime.steps.base import Outcome
from agentruns.runtime.steps.gating import Gating
from agentruns.store.connection import release_connection

logger = logging.getLogger(__name__)

SUMMARY_INSTRUCTION = (
    "Summarise the conversation below for your own later use: the user's goals, decisions, "
    "facts and tool results that still matter. Be concise; do not invent anything."
)


class Compaction(Gating):
    def _event_tokens(self, event: Ev) -> int:
        tokens = self.token_memo.get(event.sequence)
        if tokens is None:
            tokens = sum(message_tokens(message) for message in project([event]))
            self.token_memo[event.sequence] = tokens
        return tokens

    def _compact_if_needed(self, system: list[str], specs: tuple[ToolSpec, ...]) -> Outcome | None:
        budget = self.config.context_budget_tokens
        fixed = fixed_tokens(system, specs)
        units = compaction.units_of(
            effective_events(self.events),
            lambda events: sum(self._event_tokens(event) for event in events),
        )
        plan = compaction.plan(units, fixed=fixed, budget=budget)
        if plan is None:
            return self._over_budget(fixed, budget)
        refused = self._assert_context()  # CG-9: the summary call is a send too
        if refused:
            return refused
        summarised = [event for unit in plan.summarised for event in unit.events]
        request = ProviderRequest(
            model=self.config.model,
            system=(SUMMARY_INSTRUCTION,),
            messages=(UserMessage(compaction.transcript(summarised)),),
            purpose="summary",
        )
        release_connection()
        try:
            reply, _link = dispatch(self.config.links, request)
        except ProviderError as exc:
            return self._finish_failed("provider_error", f"Compaction failed: {exc}")
        too_large = self._reply_too_large(reply)
        if too_large:
            return too_large
        summary = truncate_tokens(redact(reply.text)[0], plan.summary_allowance)
        payload = {
            "summary": summary,
            "kept_from": plan.kept_from,
            "active_deferred": sorted(self._active_deferred()),
            "summarised_events": len(summarised),
            "usage": reply.token_usage,  # OPS-1: the summary call is paid for too
        }
        self._commit([(ev.COMPACTION, payload)], durable=False)
        return self._over_budget(fixed, budget)

    def _over_budget(self, fixed: int, budget: int) -> Outcome | None:
        """DEF-6: nothing over the budget is ever sent, compacted or not."""
        needed = fixed + sum(self._event_tokens(e) for e in effective_events(self.events))
        if needed <= budget:
            return None
        return self._finish_failed(
            "context_budget_exceeded",
            f"The context needs {needed} tokens even after compaction; the budget is {budget}.",
            fields={"needed": needed, "budget": budget},
        )
