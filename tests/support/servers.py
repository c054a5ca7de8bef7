"""A real `manage.py runserver` process on the test database, under the production
settings (DEBUG off, WhiteNoise serving what collectstatic gathered), with its console in
a file: for the asset tests (UI-4) and the quiet-console test (UI-7)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agentruns.cluster.process import manage_py, wait_for
from agentruns.store.connection import database_url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def production_server(tmp_path: Path) -> Iterator[Server]:
    """Must run inside a `transactional_db` test: the server reads committed rows."""
    env = {
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "AGENTRUNS_STATIC_ROOT": str(tmp_path / "static"),
        "AGENTRUNS_VAR_DIR": str(tmp_path / "var"),
        "AGENTRUNS_EXTRA_TOOL_MODULES": "tests.support.tools",
        "PYTHONUNBUFFERED": "1",
        "DEBUG": "0",
    }
    manage = [sys.executable, str(manage_py())]
    subprocess.run([*manage, "collectstatic", "--noinput", "-v0"], env=env, check=True)
    port = free_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [*manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout=30, what="the production server to listen")
        yield Server(f"http://127.0.0.1:{port}", log_path)
    finally:
        server.terminate()
        server.wait(timeout=10)
