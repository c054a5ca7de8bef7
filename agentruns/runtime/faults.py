"""Deterministic crash points for the test suite; inert unless AGENTRUNS_FAULTS is set.

`AGENTRUNS_FAULTS="commit:3"` kills this process with SIGKILL at the third commit point;
`AGENTRUNS_FAULT_TRACE=/path` appends the name of every point reached, so a test can first
record an uninterrupted run and then crash it at each boundary in turn.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

COMMIT = "commit"  # after a runtime transaction committed (events, checkpoints, rows)
EFFECT_SENT = "effect_sent"  # after effect_sent_at committed, before the effect
PROVIDER = "provider"  # inside a provider call: the reply is in memory, nothing committed
TOOL_DONE = "tool_done"  # a tool ran; its result is not committed yet

_hits: Counter[str] = Counter()


@cache
def _plan(spec: str) -> dict[str, int]:
    plan = {}
    for item in spec.split(","):
        if ":" in item:
            name, count = item.split(":", 1)
            plan[name.strip()] = int(count)
    return plan


@cache
def _configured() -> tuple[str, str]:
    """(trace path, fault plan), read once: a run passes a dozen points a turn, and each
    look into os.environ, or at Django's lazy settings, cost more than the point (PERF-1)."""
    return settings.AGENTRUNS_FAULT_TRACE, settings.AGENTRUNS_FAULTS


@receiver(setting_changed)
def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("AGENTRUNS_FAULT_TRACE", "AGENTRUNS_FAULTS"):
        _configured.cache_clear()


def fault_point(name: str) -> None:
    trace, faults = _configured()
    if not trace and not faults:
        return
    _hits[name] += 1
    if trace:
        with open(trace, "a") as handle:
            handle.write(f"{name}\n")
    if _plan(faults).get(name) == _hits[name]:
        os.kill(os.getpid(), signal.SIGKILL)
