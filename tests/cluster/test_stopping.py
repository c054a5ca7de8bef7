"""OPS-8: the sentinel ignores SIGTERM and so does every worker it spawns (a group SIGTERM
reaches only the main process's handler), yet a worker whose task ran out of time is
still ended: django-q2's `terminate` becomes SIGKILL."""

from __future__ import annotations

import multiprocessing
import signal
import time
from typing import Any

from agentruns.cluster.stopping import GroupSafeSentinel


def _ignore_sigterm(ready: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(60)


def test_ops8_a_timed_out_worker_ignoring_sigterm_is_still_killed():
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    worker = context.Process(target=_ignore_sigterm, args=(ready,), daemon=True)
    worker.timer = context.Value("f", 0)  # q2: timed out
    worker.start()
    try:
        assert ready.wait(10)
        sentinel = object.__new__(GroupSafeSentinel)  # no cluster: only its reincarnate
        sentinel.pool = [worker]
        sentinel.monitor = sentinel.pusher = None
        sentinel.reincarnations = 0
        sentinel.spawn_worker = lambda: None
        sentinel.reincarnate(worker)
        worker.join(10)
        assert worker.exitcode == -signal.SIGKILL
    finally:
        worker.kill()
        worker.join(10)
