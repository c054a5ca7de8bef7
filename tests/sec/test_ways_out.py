"""CG-14: every way out has a ceiling. This lists every module that can send something out
of the system (it imports a network, mail or trace client) with the way out it serves, and
so the ceiling that bounds it (`agentruns.egress.WayOut`). A module that starts sending
anything anywhere fails here until it is listed — with a way out whose ceiling it honours
through `may_leave` — or named as sending no content."""

from __future__ import annotations

import re
from pathlib import Path

from agentruns.egress import WayOut

ROOT = Path(__file__).resolve().parents[2]
SENDERS = re.compile(
    r"^\s*(?:import|from)\s+(httpx2?|smtplib|urllib\.request|http\.client|requests|"
    r"django\.core\.mail|opentelemetry)\b",
    re.MULTILINE,
)

WAYS_OUT: dict[str, WayOut | None] = {
    # the provider call: the reachable zone's ceiling, by the context gate (CG-3, CG-9)
    "agentruns/providers/http.py": WayOut.PROVIDER,
    # tool calls: TOOL-2 refuses a call over the reachable zone's ceiling before it runs
    "agentruns/tools/builtin.py": WayOut.TOOL,
    "agentruns/tools/mcp/client.py": WayOut.TOOL,
    "agentruns/tools/mcp/connect.py": WayOut.TOOL,
    # the trace exporter: AGENTRUNS_OTEL_CONTENT_CLASS (runtime/actions/traces.py decides)
    "agentruns/tracing.py": WayOut.TRACE,
    # webhook deliveries: the webhook's trust_zone (`bounded_payload`)
    "agentruns/services/webhooks.py": WayOut.WEBHOOK,
    # approver mails: names and times only, public by construction
    "agentruns/services/notifications.py": WayOut.MAIL,
    # the transports under the webhook and mail senders (SEC-8, SEC-9): no content of their own
    "agentruns/outbound.py": None,
}


def senders() -> set[str]:
    found = set()
    for package in ("agentruns", "playground"):
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT).as_posix()
            if "/bench/" in relative or "/migrations/" in relative:
                continue  # the benchmark's peers and drivers send nothing of a run's
            if SENDERS.search(path.read_text()):
                found.add(relative)
    return found


def test_cg14_every_module_that_sends_anything_out_is_listed_with_its_way_out():
    assert senders() == set(WAYS_OUT)


def test_cg14_every_way_out_but_the_transports_names_a_ceiling():
    named = {way for way in WAYS_OUT.values() if way is not None}
    assert named == set(WayOut)


def test_cg14_the_content_sending_ways_out_decide_with_the_one_rule():
    """The modules that decide what content may leave by a way out use `may_leave`."""
    deciders = {
        "agentruns/gate/core.py": "permits",  # Zone.permits is may_leave
        "agentruns/runtime/actions/traces.py": "may_leave",
        "agentruns/services/webhooks.py": "may_leave",
    }
    for module, name in deciders.items():
        assert name in (ROOT / module).read_text(), module
