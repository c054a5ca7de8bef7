"""`manage.py cluster_status [--json]`: queue depth, runs by status, the oldest lease and
runs that look stuck (expired leases, lost wake-ups, silent runs)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentruns.cluster.status import snapshot, table


class Command(BaseCommand):
    help = "Show the execution cluster's state: queue, runs, leases, stuck runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        snap = snapshot()
        if options["json"]:
            self.stdout.write(json.dumps(snap.as_dict(), indent=2, default=str))
            return
        rows = table(snap)
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            line = f"{label:<{width}}  {value}"
            if label == "stuck" and snap.stuck:
                line = self.style.WARNING(line)
            self.stdout.write(line)
