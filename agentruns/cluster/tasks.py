"""django-q2 task entry points. Arguments are ids only (they are pickled and signed)."""

from __future__ import annotations

from agentruns.runtime.executor import execute_run


def wake(run_id: int) -> str | None:
    return execute_run(run_id)
