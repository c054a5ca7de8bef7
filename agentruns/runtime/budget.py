"""LOOP-6: fitting a turn's calls to what is left of `max_tool_calls`."""

from __future__ import annotations

from collections.abc import Sequence


def fit(call_ids: Sequence[str], *, used_before: int, limit: int) -> tuple[list[str], list[str]]:
    """The first calls in model order run; the rest are refused. Refusals are not usage."""
    remaining = max(limit - used_before, 0)
    return list(call_ids[:remaining]), list(call_ids[remaining:])
