"""The loop (LOOP-4): one claimed run driven to its next resting point.

Every model reply and tool result is committed, fenced by the lease, before the loop acts
on it; no transaction is open across a provider call or a tool (LOOP-5). What to do next
is always `next_action(fold(log))`, so a fresh run, a crash recovery and a resume after an
approval take the same path (REC-1..REC-4). The steps that act live in `runtime/steps/`.
"""

from __future__ import annotations

import logging

from django.conf import settings

from agentruns.errors import Fenced
from agentruns.models import Run
from agentruns.runtime import journal
from agentruns.runtime.compose import thread_mode
from agentruns.runtime.state import (
    AskModel,
    CallTools,
    Complete,
    Finished,
    next_action,
    restore,
)
from agentruns.runtime.steps.base import Outcome
from agentruns.runtime.steps.model_turn import ModelTurn
from agentruns.store.connection import release_connection
from agentruns.store.transitions import claim

logger = logging.getLogger(__name__)

__all__ = ["Executor", "Outcome", "execute_run"]


class Executor(ModelTurn):
    def drive(self) -> Outcome:
        """Run until the run parks, ends, is released or loses its lease."""
        try:
            self._load()
            return self._loop()
        except Fenced:
            self.lease.lost = True
            logger.warning("run %s: lease lost, stopping without writing", self.lease.run_id)
            return Outcome.FENCED
        finally:
            release_connection()

    def _load(self) -> None:
        """REC-1 (and PERF-4): the thread's log and the newest checkpoint, read once."""
        self.events, checkpoint = journal.read(self.lease)
        self.next_sequence = (self.events[-1].sequence + 1) if self.events else 1
        self.mode_name = thread_mode(self.events)
        mine = [event for event in self.events if event.run_id == self.lease.run_id]
        self.state = restore(checkpoint, mine)

    def _loop(self) -> Outcome:
        if self.lease.attempts > settings.AGENTRUNS_MAX_ATTEMPTS and not self.state.terminal:
            return self._finish_failed(
                "attempts_exhausted",
                f"The run's workers stopped {self.lease.attempts} times; giving up.",
            )
        if not self.lease.composed:
            self._compose()
        while True:
            stopped = self._boundary()
            if stopped:
                return stopped
            action = next_action(self.state)
            if isinstance(action, Finished):
                return Outcome(action.status)
            if isinstance(action, Complete):
                return self._finish(Run.Status.COMPLETED, [], final_reply=action.text)
            if isinstance(action, AskModel):
                outcome = self._model_turn(action.step)
            else:
                assert isinstance(action, CallTools)
                outcome = self._call_tools(action.turn, action.calls)
            if outcome:
                return outcome


def execute_run(run_id: int, owner: str | None = None) -> str | None:
    """Claim the run and drive it; None when it was not claimable (CLU-1: a duplicate or
    stale wake-up is harmless)."""
    lease = claim(run_id, owner)
    if lease is None:
        return None
    return Executor(lease).drive()
