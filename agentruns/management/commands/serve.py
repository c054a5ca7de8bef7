"""Start the web server (gunicorn, as in production), the django-q2 cluster and the outbox
(webhooks and mails, apart from the cluster: SEC-8) together; Ctrl-C stops all three, and
everything they started, within 10 seconds (OPS-8)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from agentruns.cluster.process import adopt_orphans, descendants, wait_for

# A terminal's Ctrl-C reaches every process of the foreground group at once; the children
# are given this long to stop on their own before they are told again (a second signal
# while django-q2's main process is still handling the first can deadlock it).
GRACE_SECONDS = 3.0
# Whatever still runs this long after the stop request is killed: nothing is left behind.
DEADLINE_SECONDS = 8.0
# A cluster worker waits at most this long for its runs to hand themselves back; a run
# still busy is reclaimed once its lease expires, as after any stop.
SHUTDOWN_SECONDS = "4"


class Command(BaseCommand):
    help = "Run the web server (gunicorn), the execution cluster and the outbox side by side."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("AGENTRUNS_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        # A supervisor stops with SIGTERM, and a shell that starts `make run` in the
        # background ignores SIGINT: both must still stop the children, never orphan them.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminate)
        adopt_orphans()  # a cluster process whose parent dies is still this one's to stop
        root = str(settings.BASE_DIR)
        gunicorn = [sys.executable, "-m", "gunicorn", "-c", f"{root}/config/gunicorn.py"]
        cluster_env = {"AGENTRUNS_SHUTDOWN_SECONDS": SHUTDOWN_SECONDS, **os.environ}
        children = [
            subprocess.Popen([*gunicorn, "--bind", f"{host}:{port}"], cwd=root),
            subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=root, env=cluster_env),
            subprocess.Popen([sys.executable, "manage.py", "outbox"], cwd=root),
        ]
        self.stdout.write(
            self.style.SUCCESS(
                f"\nagentruns is running at http://{host}:{port}/ "
                f"(admin: http://{host}:{port}/admin/). Press Ctrl-C to stop.\n"
            )
        )
        told = False
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.2)
        except _Terminated:
            told = True  # a supervisor signalled this process alone: pass it on at once
        except KeyboardInterrupt:
            pass
        finally:
            _stop(children, told=told)


class _Terminated(Exception):
    pass


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def _stop(children: list[subprocess.Popen[bytes]], *, told: bool) -> None:
    """Children still running after the grace get SIGTERM; whatever any process of this
    tree still runs at the deadline is killed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    started = time.monotonic()
    if not told:
        _wait(children, GRACE_SECONDS)
    for child in children:
        if child.poll() is None:
            child.terminate()
    _wait(children, DEADLINE_SECONDS - (time.monotonic() - started))
    for pid in descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):  # it stopped in between
            os.kill(pid, signal.SIGKILL)  # still running at the deadline, or orphaned
    for child in children:
        child.wait()
    _reap()


def _reap() -> None:
    """Collect the adopted orphans that have exited, so none is left a zombie."""
    with contextlib.suppress(ChildProcessError):  # none left
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _wait(children: list[subprocess.Popen[bytes]], seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        wait_for(
            lambda: all(child.poll() is not None for child in children),
            timeout=max(0.0, seconds),
            what="the web server, the cluster and the outbox to stop",
        )
