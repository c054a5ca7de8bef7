"""The demo catalog: providers in several zones, classified sources, fallbacks, and the
demo's own MCP server (MCP-5).

Scripted providers make every demo configuration runnable offline; the OpenAI, Anthropic
and Ollama providers show how a real endpoint is declared.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from mcp import Client
from reversion.models import Version

from agentruns.demo_accounts import DEMO_PASSWORD, DEMO_USERS, EDITOR_PERMISSIONS
from agentruns.demo_mcp import NAME as TRACKER
from agentruns.demo_mcp import build_tracker
from agentruns.models import (
    ChangeRequest,
    Configuration,
    McpServer,
    McpTool,
    Provider,
    Schedule,
    Skill,
    Snippet,
    Trigger,
)
from agentruns.services.catalog import configuration_set_sources
from agentruns.services.changes import catalog_save
from agentruns.services.mcp import (
    mcp_listing_digest,
    mcp_server_accept,
    mcp_server_review,
    mcp_tool_declare,
)
from agentruns.tools.mcp.client import run_async

PROVIDERS = [
    dict(slug="local-scripted", name="Scripted, on this host", kind="scripted", trust_zone="local"),
    dict(slug="eu-scripted", name="Scripted, EU-hosted", kind="scripted", trust_zone="external_eu"),
    dict(
        slug="global-scripted",
        name="Scripted, anywhere",
        kind="scripted",
        trust_zone="external_global",
    ),
    dict(
        slug="openai",
        name="OpenAI",
        kind="openai",
        base_url="https://api.openai.com/v1",
        api_key_env="OPENAI_API_KEY",
        trust_zone="external_global",
    ),
    dict(
        slug="anthropic",
        name="Anthropic",
        kind="anthropic",
        base_url="https://api.anthropic.com",
        api_key_env="ANTHROPIC_API_KEY",
        trust_zone="external_eu",
    ),
    dict(
        slug="ollama",
        name="Ollama on this host",
        kind="openai",
        base_url="http://127.0.0.1:11434/v1",
        api_key_env="",
        trust_zone="local",
    ),
]

SNIPPETS = [
    ("style-guide", "House style", "public", "Answer briefly and cite the ticket number."),
    ("support-playbook", "Support playbook", "internal", "Escalate outages to on-call."),
    ("incident-report", "Incident report 2026-11", "confidential", "Root cause: a stale cache."),
    ("customer-pii", "Customer records excerpt", "restricted", "Customer 4411: J. Doe, Berlin."),
    ("merger-plans", "Merger plans", "secret", "Project Falcon closes in Q1."),
    ("changelog", "Changelog", "", "v2.3 adds bulk export."),
]

SKILLS = [
    ("summarise", "Summarise", "public", "Summarise the conversation in three bullets."),
    ("triage", "Triage", "internal", "Classify the request as bug, question or outage."),
    ("forensics", "Forensics", "confidential", "Correlate the incident timeline with deploys."),
]

# The two tracker configurations (MCP-5) differ in their provider and what follows.
TRACKER_DESK: dict[str, Any] = {
    "model": "scripted-1",
    "system_prompt": "You triage tickets in the team's tracker.",
    "allowed_tools": [f"{TRACKER}.*"],
}
TRACKER_READS = {
    "text": "Reading the ticket and its customer first.",
    "tool_calls": [
        {"name": "tracker.get_ticket", "arguments": {"ticket_id": "T-1"}},
        {"name": "tracker.customer_lookup", "arguments": {"customer_id": "C-4411"}},
    ],
}

CONFIGURATIONS: list[dict[str, Any]] = [
    dict(
        slug="helpdesk",
        name="Helpdesk (global provider)",
        example_task="A customer cannot sign in since this morning: what do we tell them?",
        provider="global-scripted",
        model="scripted-1",
        system_prompt="You are the helpdesk assistant.",
        system_prompt_data_class="internal",
        snippets=["style-guide", "support-playbook"],
        skills=["triage"],
        allowed_tools=["clock.now", "notes.read"],
    ),
    dict(
        slug="incident-desk",
        name="Incident desk (EU provider, global fallback)",
        example_task="Summarise last night's incident for the report.",
        provider="eu-scripted",
        model="scripted-1",
        system_prompt="You investigate incidents.",
        system_prompt_data_class="internal",
        snippets=["incident-report"],
        skills=["forensics"],
        fallbacks=["helpdesk"],
        allowed_tools=["clock.now", "notes"],
    ),
    dict(
        slug="secure-desk",
        name="Secure desk (local provider)",
        example_task="Summarise the merger plans for the board.",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You handle restricted material.",
        system_prompt_data_class="confidential",
        snippets=["merger-plans", "customer-pii"],
        skills=["summarise"],
        allowed_tools=["clock.now", "notes"],
    ),
    dict(
        slug="openai-assistant",
        name="OpenAI assistant (Anthropic fallback)",
        provider="openai",
        model="gpt-4o-mini",
        system_prompt="You are a helpful assistant.",
        snippets=["style-guide"],
        fallbacks=["anthropic-assistant"],
        allowed_tools=["clock.now", "notes"],
    ),
    dict(
        slug="anthropic-assistant",
        name="Anthropic assistant",
        provider="anthropic",
        model="claude-sonnet-4-5",
        system_prompt="You are a helpful assistant.",
        snippets=["style-guide"],
        allowed_tools=["clock.now", "notes"],
    ),
    dict(
        slug="multi-tool-demo",
        name="Multi-tool run (scripted)",
        example_task="Write the standup note",
        provider="local-scripted",
        model="scripted-1",
        # Priced like a hosted model (per million tokens), so runs show a cost (OPS-1).
        input_token_price=Decimal("3.00"),
        output_token_price=Decimal("15.00"),
        system_prompt="You keep the team's notes.",
        snippets=["style-guide"],
        allowed_tools=["clock.now", "notes"],
        approval_exempt_tools=["notes.write"],
        max_tool_calls=5,
        script={
            "turns": [
                {
                    "text": "Checking the time and the existing note first.",
                    "tool_calls": [
                        {"name": "clock.now", "arguments": {}},
                        {"name": "notes.read", "arguments": {"title": "Standup"}},
                    ],
                },
                {
                    "tool_calls": [
                        {
                            "name": "notes.write",
                            "arguments": {"title": "Standup", "body": "Deploy at 14:00."},
                        }
                    ]
                },
                {"text": "Saved the standup note."},
            ]
        },
    ),
    dict(
        slug="approval-demo",
        name="Asks approval before writing (scripted)",
        example_task="Save a note on the incident: the cache was stale.",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You write incident notes.",
        snippets=["support-playbook"],
        allowed_tools=["notes"],
        script={
            "turns": [
                {
                    "text": "I will save the summary; this needs your approval.",
                    "tool_calls": [
                        {
                            "name": "notes.write",
                            "arguments": {"title": "Incident", "body": "Cache was stale."},
                        }
                    ],
                },
                {"text": "Done: I went on with what the approval request returned."},
            ]
        },
    ),
    # DEL-7: a triage agent hands two lookups to two child runs at once (DEL-1's
    # siblings); one needs an approval, which travels to the inbox with the child's origin,
    # and the parent waits until both have ended.
    dict(
        slug="delegate-demo",
        name="Delegates two lookups to other agents at once (scripted)",
        example_task="Triage the payments incident: who owns the service, where is its runbook?",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You triage incidents and hand lookups to the lookup agents.",
        delegates=["lookup-demo", "runbook-demo"],
        script={
            "turns": [
                {
                    "text": "I will ask who owns the payments service and find its runbook, "
                    "both at once.",
                    "tool_calls": [
                        {
                            "name": "agent.delegate",
                            "arguments": {
                                "configuration": "lookup-demo",
                                "task": "Find who owns the payments service and note it.",
                            },
                        },
                        {
                            "name": "agent.delegate",
                            "arguments": {
                                "configuration": "runbook-demo",
                                "task": "Find the runbook of the payments service.",
                            },
                        },
                    ],
                },
                {
                    "text": "Triage done: the lookup agent found the owner and noted it, and "
                    "the runbook agent found the runbook."
                },
            ]
        },
    ),
    dict(
        slug="runbook-demo",
        name="Finds runbooks (scripted)",
        example_task="Find the runbook of the payments service.",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You find the runbook of a service.",
        script={
            "turns": [
                {
                    "text": "The payments runbook is docs/runbooks/payments.md; it says to "
                    "drain the queue before a restart."
                },
            ]
        },
    ),
    dict(
        slug="lookup-demo",
        name="Looks things up and notes them, with approval (scripted)",
        example_task="Find who owns the payments service and note it.",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You look up owners of services and note what you found.",
        allowed_tools=["notes"],
        script={
            "turns": [
                {
                    "text": "The payments service is owned by the platform team; noting it.",
                    "tool_calls": [
                        {
                            "name": "notes.write",
                            "arguments": {
                                "title": "Owner of payments",
                                "body": "The platform team (on call: Ada).",
                            },
                        }
                    ],
                },
                {"text": "The payments service is owned by the platform team (on call: Ada)."},
            ]
        },
    ),
    dict(
        slug="question-demo",
        name="Asks a typed question (scripted)",
        example_task="Triage the incident and record how severe it is.",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You triage incidents.",
        allowed_tools=["human", "notes"],
        script={
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "ask_user",
                            "arguments": {
                                "question": "How severe is the incident?",
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "severity": {"type": "string", "enum": ["low", "high"]},
                                        "hours": {"type": "integer", "minimum": 0, "maximum": 72},
                                    },
                                    "required": ["severity"],
                                },
                            },
                        }
                    ]
                },
                {"text": "Thanks, I recorded the severity."},
            ]
        },
    ),
    dict(
        slug="deferred-demo",
        name="Deferred tool catalog (scripted)",
        example_task="Save a note on what you found; the notes tools are behind tool_search.",
        provider="local-scripted",
        model="scripted-1",
        system_prompt="You help with notes; more tools are behind tool_search.",
        allowed_tools=["clock.now", "notes", "http.get"],
        approval_exempt_tools=["notes.write"],
        modes=[
            {
                "name": "agent",
                "tools": ["clock.now"],
                "deferred": ["notes.read", "notes.write", "http.get"],
            },
            {"name": "chat", "tools": [], "deferred": []},
        ],
        script={
            "turns": [
                {"tool_calls": [{"name": "tool_search", "arguments": {"query": "notes"}}]},
                {
                    "tool_calls": [
                        {
                            "name": "notes.write",
                            "arguments": {"title": "Deferred", "body": "Found via tool_search."},
                        }
                    ]
                },
                {"text": "Activated the notes tools with tool_search and saved a note."},
            ]
        },
    ),
    # MCP-5: the tracker's three tools on a local provider: a read, a restricted read (a
    # local zone may take it) and a write that waits for an approval.
    dict(
        slug="mcp-demo",
        name="Ticket tracker over MCP (scripted, local)",
        example_task="Triage ticket T-1 and comment on it in the tracker.",
        provider="local-scripted",
        **TRACKER_DESK,
        script={
            "turns": [
                TRACKER_READS,
                {
                    "text": "I will note the finding on the ticket; that needs your approval.",
                    "tool_calls": [
                        {
                            "name": "tracker.add_comment",
                            "arguments": {
                                "ticket_id": "T-1",
                                "text": "Customer in Berlin affected; rollback proposed.",
                            },
                        }
                    ],
                },
                {"text": "Triage of T-1 done; each tracker call's result says whether it worked."},
            ]
        },
    ),
    # The same tools on a global provider: TOOL-2 refuses the restricted lookup.
    dict(
        slug="mcp-demo-global",
        name="Ticket tracker over MCP (scripted, global provider)",
        example_task="Triage ticket T-1.",
        provider="global-scripted",
        **TRACKER_DESK,
        script={
            "turns": [
                TRACKER_READS,
                {"text": "The customer record may not reach this provider; I used the ticket."},
            ]
        },
    ),
    dict(
        slug="local-llm",
        name="Local model via Ollama",
        provider="ollama",
        model="llama3.1",
        system_prompt="You are a helpful assistant.",
        snippets=["support-playbook"],
        allowed_tools=["clock.now"],
    ),
]


def load_demo_data() -> None:
    load_demo_mcp()
    for spec in PROVIDERS:
        Provider.objects.update_or_create(slug=spec["slug"], defaults=spec)
    for slug, name, data_class, text in SNIPPETS:
        Snippet.objects.update_or_create(
            slug=slug, defaults={"name": name, "data_class": data_class, "text": text}
        )
    for slug, name, data_class, text in SKILLS:
        Skill.objects.update_or_create(
            slug=slug, defaults={"name": name, "data_class": data_class, "instructions": text}
        )
    # Two passes: fallbacks may name configurations defined later in the list.
    for spec in CONFIGURATIONS:
        fields: dict[str, Any] = {
            k: v
            for k, v in spec.items()
            if k not in {"snippets", "skills", "fallbacks", "delegates"}
        }
        fields["provider"] = Provider.objects.get(slug=spec["provider"])
        Configuration.objects.update_or_create(slug=spec["slug"], defaults=fields)
    for spec in CONFIGURATIONS:
        configuration_set_sources(
            configuration=Configuration.objects.get(slug=spec["slug"]),
            snippet_ids=[Snippet.objects.get(slug=s).pk for s in spec.get("snippets", [])],
            skill_ids=[Skill.objects.get(slug=s).pk for s in spec.get("skills", [])],
            fallback_ids=[Configuration.objects.get(slug=s).pk for s in spec.get("fallbacks", [])],
        )
        delegates = Configuration.objects.filter(slug__in=spec.get("delegates", []))
        Configuration.objects.get(slug=spec["slug"]).delegates.set(delegates)


# The tracker's tools as the demo declares them (MCP-2); the server's own default is
# confidential and write, so an undeclared tool needs an approval.
TRACKER_TOOLS = {
    "get_ticket": ("internal", "read_only"),
    "add_comment": ("internal", "write"),
    "customer_lookup": ("restricted", "read_only"),
}


def load_demo_mcp() -> None:
    """MCP-5: register the demo's tracker at AGENTRUNS_DEMO_MCP_URL (where `manage.py
    serve` runs it) and pin its tools, listed from the same server code in-process, so
    nothing has to be running yet; then declare each tool's class and effect."""
    url = settings.AGENTRUNS_DEMO_MCP_URL
    if not url:
        return
    server, _ = McpServer.objects.update_or_create(
        slug=TRACKER,
        defaults={
            "name": "Ticket tracker (the demo's own MCP server)",
            "transport": McpServer.Transport.STREAMABLE_HTTP,
            "url": url,
            "active": True,
        },
    )
    mcp_server_review(server=server, listed=tracker_listing())
    mcp_server_accept(server_id=server.pk, listing=mcp_listing_digest(server), user=None)
    for tool in McpTool.objects.filter(server=server, name__in=TRACKER_TOOLS):
        output_class, effect = TRACKER_TOOLS[tool.name]
        mcp_tool_declare(tool=tool, output_class=output_class, effect=effect, user=None)


def tracker_listing() -> list[dict[str, Any]]:
    """The tracker's tools/list, asked of its code in-process through the SDK's client."""

    async def listing() -> list[dict[str, Any]]:
        async with Client(build_tracker(), cache=None) as client:
            listed = (await client.list_tools()).tools
        return [
            {"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
            for t in listed
        ]

    return run_async(listing)


def load_demo_users() -> None:
    """Creates the demo users once; a password changed since is left alone. They have
    addresses so the approver mails (OPS-6) show up in `make run`'s console."""
    users = get_user_model().objects
    for username, _, superuser in DEMO_USERS:
        user, created = users.get_or_create(
            username=username, defaults={"is_staff": superuser, "is_superuser": superuser}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
        if created or not user.email:
            user.email = f"{username}@example.com"
            user.save()
        if created and username == "editor":
            user.is_staff = True
            user.save()
            user.user_permissions.set(
                Permission.objects.filter(
                    content_type__app_label="agentruns", codename__in=EDITOR_PERMISSIONS
                )
            )


# SCHED-1, SCHED-4: an example schedule, inactive so a demo never starts runs by itself,
# and a trigger the README fires with curl (its runs park for approval like any other).
DEMO_TRIGGER_SECRET = "demo-alert-secret-change-me"


def load_demo_schedules() -> None:
    """After the catalog and the users: the owner is the demo's member, whom only a
    superuser may name (SCHED-2), so the admin created both."""
    users = get_user_model().objects
    owner, admin = users.get(username="member"), users.get(username="admin")
    if not Schedule.objects.filter(name="morning-report").exists():
        Schedule.objects.create(
            name="morning-report",
            configuration=Configuration.objects.get(slug="multi-tool-demo"),
            input="Write the standup note for this morning.",
            cron="0 9 * * 1-5",
            timezone="Europe/Berlin",
            catch_up=Schedule.CatchUp.ONCE,
            owner=owner,
            created_by=admin,
            active=False,
        )
    Trigger.objects.get_or_create(
        slug="demo-alert",
        defaults={
            "configuration": Configuration.objects.get(slug="approval-demo"),
            "owner": owner,
            "created_by": admin,
            "secret": DEMO_TRIGGER_SECRET,
        },
    )


def load_demo_governance() -> None:
    """GOV-1, GOV-3 in the demo, once: helpdesk's history holds two versions (the admin
    made it a little more careful), and the editor's switch of its provider to the EU
    one waits for the admin's approval in the inbox."""
    helpdesk = Configuration.objects.get(slug="helpdesk")
    if Version.objects.get_for_object(helpdesk).exists():
        return
    users = get_user_model().objects
    admin, editor = users.get(username="admin"), users.get(username="editor")
    catalog_save(kind="configuration", pk=None, user=admin, save=lambda: helpdesk)

    def more_careful() -> Configuration:
        helpdesk.max_tool_calls = max(helpdesk.max_tool_calls - 2, 1)
        helpdesk.save()
        return helpdesk

    catalog_save(kind="configuration", pk=helpdesk.pk, user=admin, save=more_careful)

    # As `catalog_save` holds it with AGENTRUNS_CHANGE_APPROVAL=on, whatever the setting.
    now = helpdesk.provider.slug if helpdesk.provider else None
    ChangeRequest.objects.create(
        kind="configuration",
        key=helpdesk.slug,
        object_id=helpdesk.pk,
        changes={"provider": [now, "eu-scripted"]},
        base_version=Configuration.objects.get(pk=helpdesk.pk).version,
        requested_by=editor,
    )
