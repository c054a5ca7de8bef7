"""The outgoing side (OPS-4, OPS-6, SEC-8): webhook deliveries and approver mails.

They are sent by a process of their own, `manage.py outbox` (which `manage.py serve`
starts beside the cluster; in production, one or more on any machine), never by the
processes and threads that drive runs: nothing a receiver or a mail server makes it wait
for can delay a lease renewal or count against the q2 task timeout of a worker holding
runs. Each attempt has one total deadline (`agentruns.outbound`), and a pass spends at
most PASS_BUDGET_SECONDS per part before it looks again, so a stop request is heard soon.
Several outbox processes may overlap: deliveries are claimed with SKIP LOCKED and mails
with a conditional update, so nothing is sent twice at once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import close_old_connections

from agentruns.services.notifications import (
    tickets_escalation_due,
    tickets_notify_due,
    tickets_remind_due,
)
from agentruns.services.webhooks import webhook_deliver_due

logger = logging.getLogger(__name__)

PASS_BUDGET_SECONDS = 2.0


def run_outbox(*, budget_seconds: float = 20.0) -> dict[str, Any]:
    """One pass: what is due, each part for about `budget_seconds` (plus the attempt it
    is in); returns how many attempts each part made."""
    report: dict[str, Any] = {}
    for name, part in (
        ("webhook_attempts", webhook_deliver_due),
        ("tickets_notified", tickets_notify_due),
        ("tickets_reminded", tickets_remind_due),
        ("tickets_escalated", tickets_escalation_due),
    ):
        try:
            report[name] = part(budget_seconds=budget_seconds)
        except Exception:  # one failing part never stops the others
            logger.exception("outbox: %s failed", name)
    return report


def serve_outbox(stop: threading.Event, *, interval: float = 1.0) -> None:
    """Pass after pass until `stop` is set; waits `interval` only when a pass found
    nothing to do. The database connection is checked before each pass, so a restarted
    database is reconnected to."""
    logger.info("outbox started (webhooks and mails; a pass every %.1f s when idle)", interval)
    while not stop.is_set():
        close_old_connections()
        report = run_outbox(budget_seconds=PASS_BUDGET_SECONDS)
        if not any(report.values()):
            stop.wait(interval)
    close_old_connections()
