"""`manage.py prune_runs --before DATE [--dry-run] [--batch-size N]`: the retention of the
record (SEC-13), which no page, admin action or API offers. See
`agentruns.services.retention` for what goes and what stays."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from agentruns.services.retention import runs_prune


def cutoff(text: str) -> datetime:
    """A date (midnight UTC) or an ISO datetime (UTC unless it names its zone)."""
    moment = parse_datetime(text)
    if moment is None:
        day = parse_date(text)
        if day is None:
            raise CommandError(f"--before {text!r} is not a date (2026-01-31) or an ISO datetime.")
        moment = datetime.combine(day, time.min)
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=UTC)
    if moment > timezone.now():
        raise CommandError("--before lies in the future; nothing that recent is prunable.")
    return moment


class Command(BaseCommand):
    help = (
        "Delete threads whose runs all ended before a cutoff, with their runs, events, "
        "tickets, tool invocations, checkpoints, notes and finished webhook deliveries. "
        "Live runs and their threads are never touched; gate audits and daily usage stay."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", required=True, help="Cutoff: a date or ISO datetime.")
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")
        parser.add_argument(
            "--batch-size", type=int, default=500, help="Threads per transaction (500)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        summary = runs_prune(
            before=cutoff(options["before"]),
            dry_run=options["dry_run"],
            batch_size=options["batch_size"],
        )
        self.stdout.write(f"{summary.sentence()} {summary.batches} batch(es).")
