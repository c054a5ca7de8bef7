"""CG-14: every way out has a ceiling, and ONE rule says whether content may take it.

What leaves this system leaves by one of `WayOut`: to a provider (the context gate, a
zone's ceiling), to a trace exporter (`AGENTRUNS_OTEL_CONTENT_CLASS`), to a webhook
receiver (the webhook's `trust_zone`) or in a mail (`AGENTRUNS_MAIL_CONTENT_CLASS`). The ways
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
    PROVIDER = "provider"
    TRACE = "trace"
    WEBHOOK = "webhook"
    MAIL = "mail"


def withheld_marker(label: DataClass | None) -> str:
    """What a field holds in place of content that may not leave (CG-14)."""
    return f"withheld: {label.label if label else 'unknown'}"
