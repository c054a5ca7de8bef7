"""Start the web server (gunicorn, as in production), the django-q2 cluster, the outbox
(webhooks and mails, apart from the cluster: SEC-8) and the demo's own MCP server when the
demo data registered it (MCP-5) together; Ctrl-C stops them all, and everything they
started, within 10 seconds (OPS-8)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentruns.cluster.process import adopt_orphans, descendants, wait_for
from agentruns.demo_mcp import NAME as TRACKER
from agentruns.models import McpServer

# A terminal's Ctrl-C reaches every process of the foreground group at once; the children
# are given this long to stop on their own before they are told again (the cluster's main
# process ignores the second signal while it stops: agentruns.cluster.stopping).
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
        tracker = _demo_mcp_command()
        if tracker:
            _check_free(settings.AGENTRUNS_DEMO_MCP_URL)
        # A supervisor stops with SIGTERM, and a shell that starts `make run` in the
        # background ignores SIGINT: both must still stop the children, never orphan them.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _terminate)
        adopt_orphans()  # a cluster process whose parent dies is still this one's to stop
        # OPS-6: the mails' links name the port served on, unless the site URL is set.
        site = os.environ.get("AGENTRUNS_SITE_URL") or _site_url(host, port)
        root = str(settings.BASE_DIR)
        gunicorn = [sys.executable, "-m", "gunicorn", "-c", f"{root}/config/gunicorn.py"]
        env = {**os.environ, "AGENTRUNS_SITE_URL": site}
        cluster_env = {"AGENTRUNS_SHUTDOWN_SECONDS": SHUTDOWN_SECONDS, **env}
        children = [
            subprocess.Popen([*gunicorn, "--bind", f"{host}:{port}"], cwd=root, env=env),
            subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=root, env=cluster_env),
            subprocess.Popen([sys.executable, "manage.py", "outbox"], cwd=root, env=env),
        ]
        essential = list(children)
        if tracker:
            children.append(subprocess.Popen(tracker, cwd=root))
        self.stdout.write(
            self.style.SUCCESS(
                f"\nagentruns is running at http://{host}:{port}/ "
                f"(admin: http://{host}:{port}/admin/). Press Ctrl-C to stop.\n"
            )
        )
        self.stdout.write(f"Links in mails point to {site}/ (AGENTRUNS_SITE_URL).\n")
        if tracker:
            self.stdout.write(f"The demo's MCP server: {settings.AGENTRUNS_DEMO_MCP_URL}\n")
        told = False
        try:
            while all(child.poll() is None for child in essential):
                time.sleep(0.2)
        except _Terminated:
            told = True  # a supervisor signalled this process alone: pass it on at once
        except KeyboardInterrupt:
            pass
        finally:
            _stop(children, told=told)


def _demo_mcp_command() -> list[str]:
    """MCP-5: the demo tracker's command when the demo data registered it at
    AGENTRUNS_DEMO_MCP_URL (and it is active); else nothing to start. A tracker that
    cannot start is found out before anything starts (`_check_free`)."""
    url = settings.AGENTRUNS_DEMO_MCP_URL
    if not url or not McpServer.objects.filter(slug=TRACKER, url=url, active=True).exists():
        return []
    host, port = _where(url)
    path = urlsplit(url).path or "/mcp"
    return [
        sys.executable,
        "-m",
        "agentruns.demo_mcp",
        "--host",
        host,
        "--port",
        str(port),
        "--path",
        path,
    ]


def _where(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)


def _check_free(url: str) -> None:
    """MCP-5: a taken port would leave the demo's MCP calls failing quietly for the whole
    session, so serve stops before starting anything and says what to do."""
    host, port = _where(url)
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise CommandError(
                f"The demo's MCP server cannot listen on {host}:{port} ({error.strerror}): "
                "another program (another `make run`?) holds the port. Stop it, or choose "
                f"a free port, e.g. AGENTRUNS_DEMO_MCP_URL=http://{host}:{port + 1}/mcp "
                "make run (the demo data registers the server at that address), or set "
                "AGENTRUNS_DEMO_MCP_URL= (empty) to run without it."
            ) from error


def _site_url(host: str, port: int) -> str:
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"  # every interface: this machine's own address reaches it
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


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
