"""`make interop` (INT-1): the demo's `local-llm` configuration through a tool round trip
against a real OpenAI-compatible server (llama.cpp's `llama-server`, serving SmolLM2-135M),
on the database the command is given. Not part of the suite: it needs that server running."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agentruns import events as ev
from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Event, Provider, Run
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit

PROMPT = "What time is it now? Call the clock_now tool to find out, then tell me."


class Command(BaseCommand):
    help = "Run the demo's local-llm configuration against an OpenAI-compatible server."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8089/v1")
        parser.add_argument("--model", default="smollm2")
        parser.add_argument("--context-window", type=int, default=2048)
        parser.add_argument("--prompt", default=PROMPT)
        parser.add_argument("--tool-choice", default="auto", choices=["auto", "required", "omit"])

    def handle(self, *args: Any, **options: Any) -> None:
        load_demo_data()
        Provider.objects.filter(slug="ollama").update(
            base_url=options["base_url"],
            tool_choice=options["tool_choice"],
            max_output_tokens=256,
            context_window_tokens=options["context_window"],
            timeout_seconds=300,
            max_retries=0,
        )
        Configuration.objects.filter(slug="local-llm").update(
            model=options["model"], system_prompt="Use the tools you are given."
        )
        user, _ = get_user_model().objects.get_or_create(
            username="interop", defaults={"is_staff": True, "is_superuser": True}
        )
        run, _ = run_submit(
            user=user, submission=Submission(configuration="local-llm", input=options["prompt"])
        )
        self.stdout.write(
            f"asking {options['model']} at {options['base_url']} (tool_choice "
            f"{options['tool_choice']}, max_tokens 256, tool offered: clock_now): "
            f"{options['prompt']!r}"
        )
        status = execute_run(run.pk)
        run.refresh_from_db()
        events = Event.objects.filter(run=run).order_by("sequence")
        for event in events:
            self.stdout.write(f"{event.sequence:3} {event.type:22} {_short(event.payload)}")
        logged = [ev.parse(e.type, e.payload) for e in events]
        called = [e for e in logged if isinstance(e, ev.AssistantMessage) and e.tool_calls]
        answered = [e for e in logged if isinstance(e, ev.ToolResult) and e.status == ev.OK]
        round_trip = bool(called and answered and status == Run.Status.COMPLETED)
        self.stdout.write(f"run {run.pk}: {status}; final reply: {run.final_reply!r}")
        self.stdout.write(f"tool round trip: {str(round_trip).lower()}")
        if not round_trip:
            raise CommandError(f"no tool round trip (failure: {run.failure})")


def _short(payload: dict[str, Any]) -> str:
    text = str({k: v for k, v in payload.items() if k in ("text", "tool_calls", "content", "code")})
    return text if len(text) <= 160 else text[:157] + "..."
