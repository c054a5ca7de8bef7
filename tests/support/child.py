"""A worker process for crash tests: `python -m tests.support.child <run_id>`.

It sets Django up from its environment (DATABASE_URL, AGENTRUNS_FAULTS,
AGENTRUNS_FAULT_TRACE, AGENTRUNS_EXTRA_TOOL_MODULES, ...), claims the run and drives it
with
`execute_run`, exactly as a cluster worker would, then prints the outcome. A fault point
named in AGENTRUNS_FAULTS kills the process with SIGKILL, so the parent sees exit -9.

Exit codes: 0 driven (the outcome is printed), 3 the run was not claimable, 2 bad usage.
"""

from __future__ import annotations

import os
import sys

NOT_CLAIMABLE = 3


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m tests.support.child <run_id>", file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()

    from agentruns.runtime.loop import execute_run

    outcome = execute_run(int(argv[1]))
    print(f"outcome={outcome}", flush=True)
    return NOT_CLAIMABLE if outcome is None else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
