"""Reading a Linux process's status line (`/proc/<pid>/stat`), for the cluster's process
control and the benchmark's CPU sampling alike."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of `/proc/<pid>/stat` after the command name, the state first (so the
    parent is [1], the process group [2], user and system CPU ticks [11] and [12]); None
    once the process is gone. The name is split off at its last parenthesis, as it may
    itself hold spaces and parentheses."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()
