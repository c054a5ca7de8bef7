"""Reading a process's status line, whose command name may hold spaces and parentheses:
the cluster's process control (Ctrl-C, stopping a cluster) and the benchmark's CPU figures
(PERF-6) both read it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentruns.cluster.process import group_pids, wait_for
from agentruns.procfs import stat_fields

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc")

ODD_NAME = "a) b (c"
RENAME_AND_WAIT = (
    "import ctypes, sys; "
    f"ctypes.CDLL(None).prctl(15, {ODD_NAME.encode()!r}, 0, 0, 0); "  # PR_SET_NAME
    "sys.stdin.read()"
)


def test_a_process_named_with_spaces_and_parentheses_still_reads_its_parent_group_and_cpu():
    child = subprocess.Popen(
        [sys.executable, "-c", RENAME_AND_WAIT], stdin=subprocess.PIPE, start_new_session=True
    )
    try:
        wait_for(
            lambda: Path(f"/proc/{child.pid}/comm").read_text() == ODD_NAME + "\n",
            timeout=10,
            what="the child to rename itself",
        )
        fields = stat_fields(child.pid)
        assert fields is not None
        assert fields[0] in {"R", "S"}
        assert (int(fields[1]), int(fields[2])) == (os.getpid(), child.pid)
        assert fields[11].isdigit() and fields[12].isdigit()  # user and system CPU ticks
        assert group_pids(child.pid) == [child.pid]
    finally:
        child.communicate(b"")
    assert stat_fields(child.pid) is None
    assert group_pids(child.pid) == []
