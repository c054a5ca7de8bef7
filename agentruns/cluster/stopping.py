"""OPS-8: the cluster stops gracefully on SIGTERM however it is sent: to its main process
alone (a container's stop) or to its whole process group (systemd's default
`KillMode=control-group`).

django-q2 (1.11) leaves SIGTERM's default action in the sentinel and everything it spawns.
A group SIGTERM killed them where they stood, and when the main process's handler ran
before the sentinel had finished dying (a busy machine), `stop_event.set()` waited forever
for the dead sentinel to acknowledge the wake-up (multiprocessing's Condition counts its
sleepers). Here the sentinel ignores SIGTERM, and what it spawns inherits that: only the
main process acts on it, the graceful way (SIGINT, a terminal's Ctrl-C, was already
ignored below it). The sentinel still ends a worker whose task ran out of time, with
SIGKILL now, which such a worker cannot ignore.
"""

from __future__ import annotations

import signal
from multiprocessing import Process
from typing import Any

import django_q.cluster


class GroupSafeSentinel(django_q.cluster.Sentinel):
    def start(self) -> None:
        # Its __init__ set SIGTERM's default action; this runs next, before any spawn.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        super().start()

    def reincarnate(self, process: Process) -> None:
        if process in self.pool:
            # q2 terminates a timed-out worker, which ignores SIGTERM here.
            process.terminate = process.kill  # type: ignore[method-assign]
        super().reincarnate(process)


class GroupSafeCluster(django_q.cluster.Cluster):
    def sig_handler(self, signum: int, frame: Any) -> None:
        # A second signal while the first is handled would re-enter `stop_event.set()`,
        # whose lock is not reentrant: the cluster is already stopping, so it is ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        super().sig_handler(signum, frame)


def group_safe() -> None:
    """Make the clusters this process starts stop gracefully on a group SIGTERM (the
    `qcluster` command calls it before it builds its cluster)."""
    django_q.cluster.Sentinel = GroupSafeSentinel
