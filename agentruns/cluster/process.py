"""Starting and stopping real `manage.py qcluster` processes: for the benchmark command and
the cluster tests. Each cluster runs in its own session, so it can be killed as a whole
(SIGKILL to the process group, like a machine dying) or stopped gracefully (SIGTERM to its
main process, like a deploy)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from django.conf import settings

from agentruns.procfs import stat_fields

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def manage_py() -> Path:
    return Path(settings.BASE_DIR) / "manage.py"


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent, process group) of every live process (Linux /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        if fields is not None and fields[0] != "Z":
            found[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return found


def group_pids(pgid: int) -> list[int]:
    """Every live process of a process group."""
    return sorted(pid for pid, (_, group) in _processes().items() if group == pgid)


def descendants(pid: int) -> list[int]:
    """Every live process below `pid`: its children, theirs, and so on."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in _processes().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, ()))
    return sorted(found)


def adopt_orphans() -> bool:
    """Make this process the parent of every descendant whose own parent dies (Linux's
    child subreaper), so `descendants` still finds them; False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class ClusterProcess:
    popen: subprocess.Popen[bytes]
    log_path: Path
    name: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def pids(self) -> list[int]:
        return group_pids(self.pid)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group: sentinel, pusher, monitor, workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        wait_for(lambda: not self.pids(), timeout=30, what=f"cluster {self.name} to die")

    def stop(self, timeout: float = 60.0) -> int | None:
        """Graceful: SIGTERM to the main process only (workers finish and release)."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.pids():
            self.kill()
        return self.popen.returncode

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def start_cluster(
    name: str,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    python: str | None = None,
    command: str = "qcluster",
    prefix: Sequence[str] = (),
) -> ClusterProcess:
    """Start `manage.py qcluster` (or another long-running `command`, such as `outbox`)
    with the current environment plus `env`; `prefix` runs it inside something that execs
    it in its own place (a simulated host's namespace and cgroup), same process id."""
    full_env = {**os.environ, **(env or {})}
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            [*prefix, python or sys.executable, str(manage_py()), command],
            cwd=str(manage_py().parent),
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return ClusterProcess(popen=popen, log_path=log_path, name=name)


T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], *, timeout: float, what: str = "a condition", every: float = 0.05
) -> T:
    """Poll until `condition()` is truthy; return its value or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
