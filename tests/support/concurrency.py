"""Work started on several threads at the same instant, each on its own database
connection, as concurrent requests or workers are (never a mocked race)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def at_once(count: int, work: Callable[[], T], *, timeout: float = 60) -> list[T]:
    """What `work` returned on each of `count` threads released together by a barrier;
    the first error a thread raised is raised here, and a thread still running after
    `timeout` fails the test."""
    start = threading.Barrier(count)
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait(timeout=timeout)
            results.append(work())
        except BaseException as exc:  # re-raised below, never swallowed
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread is still running"
    if errors:
        raise errors[0]
    return results
