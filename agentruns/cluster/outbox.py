"""The cluster's outgoing side (OPS-4, OPS-6): webhook deliveries and approver mails.

A pass runs beside every worker's heartbeat on a thread of its own (`kick`, at most one
per process at a time), so a receiver that hangs delays neither a run nor a lease renewal;
and as a django-q2 schedule once a minute (`scheduled`, migration 0009), the floor when no
worker is beating. Passes on several machines may overlap: deliveries are claimed with
SKIP LOCKED and mails with a conditional update, so nothing is sent twice at once.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agentruns.services.notifications import tickets_notify_due, tickets_remind_due
from agentruns.services.webhooks import webhook_deliver_due
from agentruns.store.connection import close_thread_connections

logger = logging.getLogger(__name__)

_busy = threading.Lock()


def run_outbox() -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, part in (
        ("webhook_attempts", webhook_deliver_due),
        ("tickets_notified", tickets_notify_due),
        ("tickets_reminded", tickets_remind_due),
    ):
        try:
            report[name] = part()
        except Exception:  # one failing part never stops the others
            logger.exception("outbox: %s failed", name)
    return report


def kick() -> bool:
    """Start a pass on a background thread unless one is still going; never waits."""
    if not _busy.acquire(blocking=False):
        return False
    threading.Thread(target=_pass, name="agentruns-outbox", daemon=True).start()
    return True


def _pass() -> None:
    try:
        run_outbox()
    finally:
        close_thread_connections()
        _busy.release()


def scheduled() -> dict[str, Any]:
    """The django-q2 schedule's entry. It runs in a q2 worker, whose driver (and pool)
    `post_spawn` already started (cluster/broker.py)."""
    try:
        return run_outbox()
    finally:
        close_thread_connections()
