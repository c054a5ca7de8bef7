"""`manage.py outbox`: the process that sends webhook deliveries and approver mails
(OPS-4, OPS-6), apart from the processes that drive runs (SEC-8). `manage.py serve` starts
one; in production run one or more beside the cluster. SIGTERM or Ctrl-C stops it after
the attempt in flight (each has a total deadline)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentruns.cluster.outbox import run_outbox, serve_outbox


class Command(BaseCommand):
    help = "Send due webhook deliveries and approver mails, until stopped (or --once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument(
            "--interval", type=float, default=1.0, help="Seconds between idle passes (1)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            self.stdout.write(str(run_outbox()))
            return
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        serve_outbox(stop, interval=options["interval"])
