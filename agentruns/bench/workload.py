"""The reference workload: a scripted provider with no latency, TURNS model turns each
proposing CALLS read-only no-op tool calls, then a final reply (31 durable steps for
10 x 2)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from agentruns import events as ev
from agentruns.classes import DataClass
from agentruns.models import Configuration, Provider, Run, Ticket
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import ResumeCommand
from agentruns.services.runs import Submission, run_submit
from agentruns.tools.registry import REGISTRY, Effect, Tool, ToolContext, ToolOutput

NOOP = "bench.noop"


def _noop(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(arguments.get("x", "")))


def register_noop() -> None:
    if REGISTRY.get(NOOP) is None:
        REGISTRY.register(
            Tool(
                name=NOOP,
                description="Return x.",
                parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
                group="bench",
                output_class=DataClass.PUBLIC,
                effect=Effect.READ_ONLY,
                version="1",
                execute=_noop,
            )
        )


def script(turns: int, calls: int, latency_ms: int = 0, park: bool = False) -> dict[str, Any]:
    rounds = [
        {"tool_calls": [{"name": NOOP, "arguments": {"x": i}} for i in range(calls)]}
        for _ in range(turns)
    ]
    if park:  # a last write that needs approval parks the run (PERF-4)
        rounds.append(
            {"tool_calls": [{"name": "notes.write", "arguments": {"title": "b", "body": "b"}}]}
        )
    return {"turns": [*rounds, {"text": "done"}], "latency_ms": latency_ms}


def configuration(
    slug: str,
    turns: int,
    calls: int,
    latency_ms: int = 0,
    *,
    park: bool = False,
    daily_limit: int | None = None,
) -> Configuration:
    register_noop()
    provider, _ = Provider.objects.update_or_create(
        slug="bench-scripted",
        defaults={"name": "Bench", "kind": "scripted", "trust_zone": "local"},
    )
    config, _ = Configuration.objects.update_or_create(
        slug=slug,
        defaults={
            "name": slug,
            "provider": provider,
            "model": "scripted",
            "allowed_tools": [NOOP, "notes.write"],
            "max_tool_calls": turns * calls + 1,
            "context_budget_tokens": 10_000_000,
            "script": script(turns, calls, latency_ms, park),
            "daily_token_limit": daily_limit,
        },
    )
    return config


def bench_user() -> Any:
    user, _ = get_user_model().objects.update_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    return user


def submit(config: Configuration, user: Any) -> int:
    run, _ = run_submit(user=user, submission=Submission(configuration=config.slug, input="go"))
    return run.pk


def execute(run_id: int) -> str | None:
    return execute_run(run_id)


def run_to_end(run_id: int) -> None:
    status = execute_run(run_id)
    if status != Run.Status.COMPLETED:
        raise RuntimeError(f"bench run {run_id} ended {status}")


def allow_as_shown(ticket: Ticket) -> ResumeCommand:
    """An approver's allow for exactly the call the ticket shows."""
    return ResumeCommand(
        identity=ticket.identity, answer=Ticket.Answer.PERMISSION, decision=ev.ALLOW
    )
