"""The API's documentation (UI-4, UI-7): every operation's summary, example requests that
are valid against the demo data, and the pages that show them.

The examples work as they stand on `make run`'s data (`manage.py demo_data` on a fresh
database, so snippet 6 is the changelog and skill 1 `summarise`); tests/api/test_docs.py
posts every one. A resume names a live ticket, so its identity fields are placeholders to
copy from `GET /api/tickets/`.

Swagger UI and Redoc come from the sidecar's files. Redoc's sidebar shows a logo from
cdn.redoc.ly that no setting turns off: `playground/redoc-offline.js` points it at this
site's icon, and the page's Content-Security-Policy refuses anything from elsewhere.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import OpenApiExample, extend_schema
from drf_spectacular.views import SpectacularRedocView

from agentruns.selectors import EXAMPLE_TASK

# Redoc styles itself inline and searches in a worker it builds from a blob.
REDOC_POLICY = "; ".join(
    [
        "default-src 'self'",
        "img-src 'self' data:",
        "style-src 'self' 'unsafe-inline'",
        "script-src 'self' 'unsafe-inline'",
        "worker-src 'self' blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
    ]
)


class RedocView(SpectacularRedocView):
    @extend_schema(exclude=True)
    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = REDOC_POLICY
        return response


def example(summary: str, value: dict[str, Any]) -> OpenApiExample:
    return OpenApiExample(summary, value=value, request_only=True)


def crud(
    noun: str,
    plural: str,
    *,
    create: OpenApiExample,
    replace: OpenApiExample,
    change: OpenApiExample,
    article: str = "",
) -> dict[str, Any]:
    """`extend_schema_view` arguments for a model viewset: each operation's summary, and an
    example body for each write."""
    a = article or ("an" if noun[0] in "aeiou" else "a")
    return {
        "list": extend_schema(summary=f"List {plural}"),
        "create": extend_schema(summary=f"Create {a} {noun}", examples=[create]),
        "retrieve": extend_schema(summary=f"Get {a} {noun}"),
        "update": extend_schema(summary=f"Replace {a} {noun}", examples=[replace]),
        "partial_update": extend_schema(
            summary=f"Update some fields of {a} {noun}", examples=[change]
        ),
        "destroy": extend_schema(summary=f"Delete {a} {noun}"),
    }


RUN_EXAMPLES = [
    example(
        "A run that completes by itself (scripted, works offline)",
        {"configuration": "multi-tool-demo", "input": EXAMPLE_TASK},
    ),
    example(
        "A run that waits for an approval (answer it with resume)",
        {"configuration": "approval-demo", "input": "Save the incident summary"},
    ),
    example(
        "A dry run with the changelog snippet forced in (nothing is sent)",
        {
            "configuration": "helpdesk",
            "input": "What changed in v2.3?",
            "forced_snippets": [6],
            "dry_run": True,
        },
    ),
]

IDENTITY = {
    "correlation_id": "<from GET /api/tickets/>",
    "run": 1,
    "snapshot_id": "<from GET /api/tickets/>",
    "catalog_fingerprint": "<from GET /api/tickets/>",
    "call_id": "<from GET /api/tickets/>",
}
RESUME_EXAMPLES = [
    example(
        "Approve a tool call (copy the identity fields and target.arguments_digest from the "
        "ticket: SEC-16)",
        {
            **IDENTITY,
            "result": {
                "kind": "permission",
                "decision": "allow",
                "note": "Looks right.",
                "arguments_digest": "<from GET /api/tickets/>",
            },
        },
    ),
    example(
        "Approve with edited arguments (HITL-12: same tool, checked against its schema)",
        {
            **IDENTITY,
            "result": {
                "kind": "permission",
                "decision": "allow",
                "arguments": {"title": "Incident 4711", "body": "Cache was stale; purged."},
                "note": "Named the incident.",
            },
        },
    ),
    example(
        "Answer question-demo's question (copy the identity fields from the ticket)",
        {**IDENTITY, "result": {"kind": "input", "value": {"severity": "high", "hours": 2}}},
    ),
]

READOUT_EXAMPLES = [
    example(
        "The changelog snippet and the summarise skill forced in",
        {"forced_snippets": [6], "forced_skills": [1]},
    )
]

FORK_EXAMPLES = [
    example(
        "Fork at the run's end onto the same configuration, with a new prompt",
        {"input": "Now write it as a haiku."},
    ),
    example(
        "Fork at a model turn (its event's sequence) onto another configuration",
        {"at": 2, "configuration": "multi-tool-demo"},
    ),
]

REPLAY_EXAMPLES = [
    example(
        "Replay a finished run on a candidate configuration (GOV-4)",
        {"runs": [1], "configuration": "multi-tool-demo"},
    ),
]

MODE_EXAMPLES = [example("Switch a deferred-demo thread to its chat mode", {"mode": "chat"})]

PROVIDERS = crud(
    "provider",
    "providers",
    create=example(
        "A local OpenAI-compatible server (vLLM), no key",
        {
            "slug": "vllm-local",
            "name": "vLLM on this host",
            "kind": "openai",
            "base_url": "http://127.0.0.1:8001/v1",
            "trust_zone": "local",
        },
    ),
    replace=example(
        "ollama, with a longer timeout",
        {
            "slug": "ollama",
            "name": "Ollama on this host",
            "kind": "openai",
            "base_url": "http://127.0.0.1:11434/v1",
            "trust_zone": "local",
            "timeout_seconds": 120,
        },
    ),
    change=example("openai: a shorter timeout", {"timeout_seconds": 30}),
)

CONFIGURATIONS = crud(
    "configuration",
    "configurations",
    create=example(
        "A scripted note keeper with one mode",
        {
            "slug": "standup-bot",
            "name": "Standup bot (scripted)",
            "provider": "local-scripted",
            "model": "scripted-1",
            "system_prompt": "You keep the team's notes.",
            "snippets": ["style-guide"],
            "allowed_tools": ["clock.now", "notes"],
            "approval_exempt_tools": ["notes.write"],
            "modes": {"agent": {"tools": ["clock.now", "notes.read", "notes.write"]}},
            "script": {"turns": [{"text": "Noted."}]},
        },
    ),
    replace=example(
        "helpdesk, allowed fewer tool calls",
        {
            "slug": "helpdesk",
            "name": "Helpdesk (global provider)",
            "provider": "global-scripted",
            "model": "scripted-1",
            "system_prompt": "You are the helpdesk assistant.",
            "system_prompt_data_class": "internal",
            "snippets": ["style-guide", "support-playbook"],
            "skills": ["triage"],
            "allowed_tools": ["clock.now", "notes.read"],
            "max_tool_calls": 5,
        },
    ),
    change=example(
        "helpdesk: four-eyes approvals", {"require_second_approver": True, "max_tool_calls": 8}
    ),
)

SNIPPETS = crud(
    "snippet",
    "snippets",
    create=example(
        "An internal snippet",
        {
            "slug": "on-call",
            "name": "On-call rota",
            "text": "Week 49: Priya, then Tom.",
            "data_class": "internal",
        },
    ),
    replace=example(
        "Snippet 6 (changelog), declared public",
        {
            "slug": "changelog",
            "name": "Changelog",
            "text": "v2.4 adds SSO.",
            "data_class": "public",
        },
    ),
    change=example("Snippet 6 (changelog): declare it public", {"data_class": "public"}),
)

SKILLS = crud(
    "skill",
    "skills",
    create=example(
        "An internal skill",
        {
            "slug": "escalate",
            "name": "Escalate",
            "instructions": "Say who is on call and page them.",
            "data_class": "internal",
        },
    ),
    replace=example(
        "Skill 1 (summarise), longer",
        {
            "slug": "summarise",
            "name": "Summarise",
            "instructions": "Summarise the conversation in five bullets.",
            "data_class": "public",
        },
    ),
    change=example("Skill 1 (summarise): turn it off", {"active": False}),
)

WEBHOOK = {
    "url": "https://hooks.example.com/agentruns",
    "events": ["run.completed", "run.failed", "ticket.opened"],
    "secret": "change-me-to-a-long-random-secret",
    "description": "Team chat",
}
SCHEDULE = {
    "name": "weekday-standup",
    "configuration": "multi-tool-demo",
    "input": "Write the standup note for this morning.",
    "cron": "0 9 * * 1-5",
    "timezone": "Europe/Berlin",
    "catch_up": "once",
}
TRIGGER = {
    "slug": "deploy-alert",
    "configuration": "multi-tool-demo",
    "secret": "change-me-to-a-long-random-secret",
}
MCP_SERVER = {
    "slug": "wiki",
    "name": "The team wiki",
    "transport": "streamable_http",
    "url": "https://mcp.example.com/mcp",
    "output_class": "internal",
    "effect": "read_only",
}
MCP_SERVERS = crud(
    "MCP server",
    "MCP servers",
    create=example("A streamable HTTP server whose tools only read internal data", MCP_SERVER),
    replace=example("The same, listed within 20 s", {**MCP_SERVER, "timeout_seconds": 20}),
    change=example("Its tools return confidential data", {"output_class": "confidential"}),
    article="an",
)
MCP_ACCEPT_EXAMPLES = [
    example("Pin the listing a refresh returned", {"listing": "<from POST .../refresh/>"})
]
MCP_DECLARE_EXAMPLES = [
    example(
        "tracker.customer_lookup returns restricted data and only reads",
        {"output_class": "restricted", "effect": "read_only"},
    )
]

WEBHOOKS = crud(
    "webhook",
    "webhooks",
    create=example("Runs that end and tickets that open, to a chat bridge", WEBHOOK),
    replace=example("Every event type (no `events`), same secret", {**WEBHOOK, "events": []}),
    change=example("Pause it", {"active": False}),
)

SCHEDULES = crud(
    "schedule",
    "schedules",
    create=example("Weekdays at 09:00 Berlin time, one catch-up run after downtime", SCHEDULE),
    replace=example(
        "The demo's schedule every hour instead",
        {
            **{k: v for k, v in SCHEDULE.items() if k != "cron"},
            "name": "morning-report",
            "interval_seconds": 3600,
        },
    ),
    change=example("Pause it", {"active": False}),
)
TRIGGERS = crud(
    "trigger",
    "triggers",
    create=example("A deploy system's alerts start a run", TRIGGER),
    replace=example(
        "The demo's trigger with a new secret",
        {"slug": "demo-alert", "configuration": "approval-demo", "secret": "a-new-long-secret"},
    ),
    change=example("Pause it", {"active": False}),
)
TRIGGER_FIRE = example(
    "An alert from a monitoring system (sign it: see docs/api.md)",
    {"alert": "disk almost full", "host": "db-1", "severity": "warning"},
)
