"""What a test left running: threads and child processes alive after its teardown that were
not alive before it (tests/conftest.py fails the test). Work left running races the next
test and pytest-django's flush (a TRUNCATE meeting a driver thread's UPDATE deadlocks).

Threads: every non-daemon thread, and the application's own daemon threads (the driver's
`agentruns-*` executors and heartbeat), which would go on writing to the database. Other
daemon threads (an HTTP server's per-request threads, a connection pool's workers) die
with the process and touch no table. Child processes: read from /proc, so no dependency.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# The application's daemon threads (agentruns/cluster/driver.py names them).
APP_THREAD_PREFIX = "agentruns-"
# A thread or child that is finishing gets this long to finish.
GRACE_SECONDS = 5.0

# Threads a wider-scoped fixture owns though its tests start them (see `owned`).
_owned: list[Callable[[threading.Thread], bool]] = []


@contextmanager
def owned(by: Callable[[threading.Thread], bool]) -> Iterator[None]:
    """While a wider-scoped fixture is up, threads matching `by` are its own, started
    lazily by whichever test first needs them, and stopped with the fixture."""
    _owned.append(by)
    try:
        yield
    finally:
        _owned.remove(by)


@dataclass(frozen=True)
class Running:
    threads: frozenset[threading.Thread]
    children: frozenset[int]

    def new_since(self, before: Running) -> Running:
        return Running(self.threads - before.threads, self.children - before.children)

    def __bool__(self) -> bool:
        return bool(self.threads or self.children)

    def describe(self) -> str:
        parts = [f"thread {t.name!r} (daemon={t.daemon})" for t in self.threads]
        parts += [f"child process {pid} ({_command(pid)})" for pid in sorted(self.children)]
        return ", ".join(parts)


def watched(thread: threading.Thread) -> bool:
    if any(by(thread) for by in _owned):
        return False
    return not thread.daemon or thread.name.startswith(APP_THREAD_PREFIX)


def running() -> Running:
    threads = frozenset(t for t in threading.enumerate() if t.is_alive() and watched(t))
    return Running(threads, frozenset(_live_children()))


def left_running(before: Running, grace: float = GRACE_SECONDS) -> Running:
    """What is still running that was not before, after waiting up to `grace` seconds for
    it to finish (a joined-but-exiting thread, a killed child not yet reaped)."""
    deadline = time.monotonic() + grace
    while True:
        left = running().new_since(before)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def _live_children() -> set[int]:
    """This process's children that have not exited (a zombie has: it only waits to be
    reaped, which `subprocess` does on its next poll)."""
    pids: set[int] = set()
    task_dir = f"/proc/{os.getpid()}/task"
    try:
        tasks = os.listdir(task_dir)
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"{task_dir}/{tid}/children") as listing:
                pids.update(int(pid) for pid in listing.read().split())
        except OSError:
            continue  # a thread that just exited
    return {pid for pid in pids if _state(pid) not in {"Z", "X", None}}


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "gone"
