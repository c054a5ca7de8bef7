"""Start the web server and the django-q2 cluster together; Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run the web server and the execution cluster side by side."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("AGENTRUNS_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        # A supervisor stops with SIGTERM, and a shell that starts `make run` in the
        # background ignores SIGINT: both must still stop the children, never orphan them.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        manage = [sys.executable, "manage.py"]
        children = [
            subprocess.Popen([*manage, "runserver", f"{host}:{port}", "--noreload"]),
            subprocess.Popen([*manage, "qcluster"]),
        ]
        self.stdout.write(
            self.style.SUCCESS(
                f"\nagentruns is running at http://{host}:{port}/ "
                f"(admin: http://{host}:{port}/admin/). Press Ctrl-C to stop.\n"
            )
        )
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)
            for child in children:
                try:
                    child.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    child.kill()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
