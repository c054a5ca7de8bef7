"""`manage.py serve` (what `make run` starts): web server and cluster stop together."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from agentruns.cluster.process import group_pids, wait_for

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_web_and_cluster_on_sigterm_and_sigint_even_when_started_in_background(
    tmp_path, stop
):
    """A supervisor stops with SIGTERM; a shell's background job ignores SIGINT. Either
    way no web server or cluster process is left behind."""
    port = _free_port()
    env = {**os.environ, "AGENTRUNS_VAR_DIR": str(tmp_path), "PORT": str(port)}
    env.pop("DATABASE_URL", None)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    serve = subprocess.Popen(
        [*manage, "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        # What `cmd &` in a non-interactive shell does to a job's SIGINT.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        wait_for(lambda: _answers(port), timeout=60, what="the web server to answer")
        serve.send_signal(stop)
        serve.wait(timeout=60)
        wait_for(lambda: not group_pids(serve.pid), timeout=60, what="every child to stop")
    finally:
        for pid in group_pids(serve.pid):
            os.kill(pid, signal.SIGKILL)
