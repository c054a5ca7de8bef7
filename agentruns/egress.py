"""CG-14: every way out has a ceiling, and ONE rule says whether content may take it.

What leaves this system leaves by one of `WayOut`: to a provider (the context gate, a
zone's ceiling), to a trace exporter (`AGENTRUNS_OTEL_CONTENT_CLASS`), to a webhook
receiver (the webhook's `trust_zone`) or in a mail (names and times only, public). The ways
differ only in where their ceiling comes from; `may_leave` (in `classes`, so a zone's
`permits` is the same rule) decides for all of them, and
what may not leave is replaced, in the field that held it, by `withheld_marker`.
`tests/sec/test_ways_out.py` lists the modules that send anything out: a new one fails it
until it is listed with the way (and so the ceiling) it uses.
"""

from __future__ import annotations

from enum import StrEnum

from agentruns.classes import DataClass, may_leave

__all__ = ["WayOut", "may_leave", "withheld_marker"]


class WayOut(StrEnum):
    """Each way out and where its ceiling comes from."""

    PROVIDER = "provider"  # the reachable zone of the configuration (CG-3, TZ-4)
    TOOL = "tool"  # a call's target: the same zone, checked before any call (TOOL-2)
    TRACE = "trace"  # AGENTRUNS_OTEL_CONTENT_CLASS (OPS-7)
    WEBHOOK = "webhook"  # the webhook's trust_zone
    MAIL = "mail"  # names and times only: public by construction


# A withholding's audit row (`GateAudit.verdict`); the audit export names it
# `egress.withheld`.
EGRESS_WITHHELD_VERDICT = "withheld"


def withheld_marker(label: DataClass | None) -> str:
    """What a field holds in place of content that may not leave (CG-14)."""
    return f"withheld: {label.label if label else 'unknown'}"
