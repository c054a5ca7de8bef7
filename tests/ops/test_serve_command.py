"""`manage.py serve` (what `make run` starts), OPS-8: the web app under gunicorn, the
cluster, the outbox and (MCP-5) the demo's own MCP server, stopped together within 10 s by
a terminal's Ctrl-C (SIGINT to the whole process group), a supervisor's SIGTERM, or a
SIGINT to a background launch — nothing left."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agentruns.cluster.process import group_pids, wait_for
from agentruns.demo_mcp import NAME as TRACKER
from agentruns.models import McpServer

ROOT = Path(__file__).resolve().parents[2]
STOP_SECONDS = 10  # OPS-8


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_header(port: int) -> str | None:
    try:
        url = f"http://127.0.0.1:{port}/accounts/login/"
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.headers.get("Server") or "?"
    except OSError:
        return None


def _commands(pgid: int) -> list[bytes]:
    commands = []
    for pid in group_pids(pgid):
        try:
            commands.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        except OSError:
            continue
    return commands


def _cluster_running(pgid: int) -> bool:
    """The q2 sentinel, pusher, monitor and workers are up (more than the two mains), and
    the outbox (SEC-8: webhooks and mails in a process of their own)."""
    commands = _commands(pgid)
    outbox = any(command.endswith(b"manage.py\x00outbox\x00") for command in commands)
    return outbox and sum(b"qcluster" in command for command in commands) >= 4


def _mcp_server_answers(port: int) -> bool:
    """The demo tracker speaks MCP: an initialize request gets a JSON-RPC answer."""
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
        b'"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
    )
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/mcp",
        body,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return b'"tracker"' in response.read()
    except OSError:
        return False


@pytest.mark.django_db
def test_mcp5_serve_stops_before_starting_anything_when_the_demo_mcp_port_is_taken(settings):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        settings.AGENTRUNS_DEMO_MCP_URL = f"http://127.0.0.1:{port}/mcp"
        McpServer.objects.create(
            slug=TRACKER, name="tracker", url=settings.AGENTRUNS_DEMO_MCP_URL, active=True
        )
        with pytest.raises(CommandError) as stopped:
            call_command("serve")
    said = str(stopped.value)
    assert f"cannot listen on 127.0.0.1:{port}" in said
    assert f"AGENTRUNS_DEMO_MCP_URL=http://127.0.0.1:{port + 1}/mcp make run" in said
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # nothing was started


def _sigint(disposition):
    return lambda: signal.signal(signal.SIGINT, disposition)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "stop", "at_launch"),
    [
        pytest.param("group", signal.SIGINT, signal.SIG_DFL, id="ctrl-c-to-the-group"),
        pytest.param("serve", signal.SIGTERM, signal.SIG_DFL, id="sigterm-to-serve"),
        # What `cmd &` in a non-interactive shell does to a job's SIGINT.
        pytest.param("serve", signal.SIGINT, signal.SIG_IGN, id="sigint-to-a-background-serve"),
    ],
)
def test_ops8_serve_runs_gunicorn_and_stops_everything_within_10_seconds(
    tmp_path, how, stop, at_launch
):
    port, mcp_port = _free_port(), _free_port()
    env = {**os.environ, "AGENTRUNS_VAR_DIR": str(tmp_path), "PORT": str(port)}
    env.pop("DATABASE_URL", None)
    env["AGENTRUNS_WEB_WORKERS"] = "2"
    env["AGENTRUNS_DEMO_MCP_URL"] = f"http://127.0.0.1:{mcp_port}/mcp"
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    # The demo data registers the tracker, so serve starts it too (MCP-5).
    subprocess.run([*manage, "demo_data"], cwd=ROOT, env=env, check=True, timeout=120)
    serve = subprocess.Popen(
        [*manage, "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, as a terminal's foreground job
        preexec_fn=_sigint(at_launch),
    )
    try:
        server = wait_for(lambda: _server_header(port), timeout=90, what="the web server")
        assert server.startswith("gunicorn")
        wait_for(lambda: _cluster_running(serve.pid), timeout=90, what="the cluster")
        wait_for(lambda: _mcp_server_answers(mcp_port), timeout=60, what="the demo MCP server")
        # OPS-6: the mails' links name the port served on (AGENTRUNS_SITE_URL unset).
        site = f"AGENTRUNS_SITE_URL=http://127.0.0.1:{port}".encode()
        environs = [Path(f"/proc/{pid}/environ").read_bytes() for pid in group_pids(serve.pid)]
        assert sum(site in environ.split(b"\x00") for environ in environs) >= 3
        started = time.monotonic()
        if how == "group":
            os.killpg(serve.pid, stop)  # exactly what a terminal's Ctrl-C does
        else:
            serve.send_signal(stop)
        wait_for(
            lambda: not group_pids(serve.pid),
            timeout=STOP_SECONDS,
            what="every process of the group to stop",
        )
        assert time.monotonic() - started < STOP_SECONDS
        assert serve.wait(timeout=5) is not None
    finally:
        for pid in group_pids(serve.pid):
            os.kill(pid, signal.SIGKILL)
        serve.wait(timeout=30)


def test_ops8_a_stopped_web_worker_leaves_at_once_and_no_stop_reads_like_a_crash(tmp_path):
    """A Ctrl-C reaches gunicorn's master and workers; a worker whose interpreter would
    take longer to finalise than `graceful_timeout` still leaves before it, so the master
    never has to kill one and log "was sent SIGKILL! Perhaps out of memory?"."""
    port = _free_port()
    # The finalisation (12 s) outlasts the graceful timeout (5 s), which outlasts a clean
    # stop even on a loaded machine. The signal is sent once both workers have booted (see
    # slow_exit_wsgi): one still booting loses it, and the master then waits it out.
    booted = tmp_path / "booted"
    booted.mkdir()
    env = {
        **os.environ,
        "AGENTRUNS_WEB_WORKERS": "2",
        "AGENTRUNS_WEB_GRACEFUL_TIMEOUT": "5",
        "SLOW_EXIT_BOOTED_DIR": str(booted),
    }
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        master = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "config/gunicorn.py",
                "--bind",
                f"127.0.0.1:{port}",
                "tests.support.slow_exit_wsgi:application",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: len(list(booted.iterdir())) == 2, timeout=30, what="two booted workers")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            assert response.read() == b"ok"
        started = time.monotonic()
        os.killpg(master.pid, signal.SIGINT)
        assert master.wait(timeout=STOP_SECONDS) == 0
        assert time.monotonic() - started < 5  # no worker waited out its finalisation
    finally:
        for pid in group_pids(master.pid):
            os.kill(pid, signal.SIGKILL)
        master.wait(timeout=30)
    assert "SIGKILL" not in log_path.read_text(), log_path.read_text()
