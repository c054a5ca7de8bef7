"""The loop (LOOP-4): one claimed run driven to its next resting point.

Every model reply and tool result is committed, fenced by the lease, before the loop acts
on it; no transaction is open across a provider call or a tool (LOOP-5). What to do next
is always `next_action(fold(log))`, so a fresh run, a crash recovery and a resume after an
approval take the same path (REC-1..REC-4). The actions live in `runtime/actions/`,
each a function handed the run's `RunContext` and what it acts on.
"""

from __future__ import annotations

import logging

from django.conf import settings

from agentruns.errors import Fenced
from agentruns.models import Run
from agentruns.runtime.actions.base import Outcome, RunContext
from agentruns.runtime.actions.endings import boundary, finish, finish_failed
from agentruns.runtime.actions.gating import compose
from agentruns.runtime.actions.model_turn import model_turn
from agentruns.runtime.actions.tool_calls import call_tools
from agentruns.runtime.actions.traces import begin
from agentruns.runtime.state import (
    AskModel,
    CallTools,
    Complete,
    Finished,
    next_action,
)
from agentruns.store.connection import release_connection, take_connection
from agentruns.store.records import Claim
from agentruns.store.transitions import claim

logger = logging.getLogger(__name__)

__all__ = ["Executor", "Outcome", "execute_run"]


class Executor:
    def __init__(self, claim: Claim) -> None:
        self.claim = claim

    def drive(self) -> Outcome:
        """Run until the run parks, ends, is released or loses its lease."""
        try:
            take_connection()  # a run works only while it holds one (PERF-6)
            ctx = RunContext.load(self.claim)
            trace = begin(ctx)  # OPS-7: None while tracing is off
            if trace is None:
                return run_loop(ctx)
            try:
                outcome = run_loop(ctx)
            except BaseException as exc:
                trace.end(ctx, error="fenced" if isinstance(exc, Fenced) else type(exc).__name__)
                raise
            trace.end(ctx, outcome)
            return outcome
        except Fenced:
            self.claim.signals.lose()
            run_id = self.claim.lease.run_id
            logger.warning("run %s: lease lost, stopping without writing", run_id)
            return Outcome.FENCED
        finally:
            release_connection()


def run_loop(ctx: RunContext) -> Outcome:
    """`next_action(fold(log))`, acted on by the action it names, until one stops."""
    if ctx.claim.attempts > settings.AGENTRUNS_MAX_ATTEMPTS and not ctx.state.terminal:
        return finish_failed(
            ctx,
            "attempts_exhausted",
            f"The run's workers stopped {ctx.claim.attempts} times; giving up.",
        )
    if not ctx.composed:
        compose(ctx)
    while True:
        stopped = boundary(ctx)
        if stopped:
            return stopped
        action = next_action(ctx.state)
        if isinstance(action, Finished):
            return Outcome(action.status)
        if isinstance(action, Complete):
            return finish(ctx, Run.Status.COMPLETED, [], final_reply=action.text)
        if isinstance(action, AskModel):
            outcome = model_turn(ctx, action.turn_index)
        else:
            assert isinstance(action, CallTools)
            outcome = call_tools(ctx, action.turn, action.calls)
        if outcome:
            return outcome


def execute_run(run_id: int, owner: str | None = None) -> str | None:
    """Claim the run and drive it; None when it was not claimable (CLU-1: a duplicate or
    stale wake-up is harmless)."""
    claimed = claim(run_id, owner)
    if claimed is None:
        return None
    return Executor(claimed).drive()
