"""A worker child that claims a run and dies at once (SIGKILL), before it executes anything:
the crash between an approval being committed and the approved tool starting. The fault
points of `agentruns.runtime.faults` all sit after some step was written, so this one is
a separate child; the others are `tests.support.crash.run_child`.

Like every child, it connects to the current test database: tests using it need
`@pytest.mark.django_db(transaction=True)`."""

from __future__ import annotations

import subprocess
import sys

from tests.support.crash import CHILD_TIMEOUT, PROJECT_ROOT, ChildResult, child_env

CLAIM_AND_DIE = """
import os, signal, sys
import django
django.setup()
from agentruns.store.transitions import claim
claimed = claim(int(sys.argv[1]))
print("claimed" if claimed else "not claimable", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def claim_and_die(run_id: int) -> ChildResult:
    completed = subprocess.run(
        [sys.executable, "-c", CLAIM_AND_DIE, str(run_id)],
        cwd=PROJECT_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    return ChildResult(completed.returncode, completed.stdout, completed.stderr)
