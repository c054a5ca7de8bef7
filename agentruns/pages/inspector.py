"""The playground inspector: the run page's live facts plus, per model turn, the request it
was sent (system texts, conversation, tools offered) composed from the log exactly as the
loop composes it, its reply and its tool calls."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agentruns.models import Event, Run
from agentruns.pages import timeline
from agentruns.pages.runs import live_context
from agentruns.runtime.compose import compose_request, thread_mode
from agentruns.runtime.config import build_runtime_config
from agentruns.runtime.context import effective_events
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.state import Ev
from agentruns.selectors import run_sources
from agentruns.services.runs import message_dict


def inspector_context(run: Run) -> dict[str, Any]:
    context = live_context(run)
    turns = timeline.turns(run, context["events"])
    # A refused run sent nothing, and a refusal never shows a source's text (CG-7).
    refused = (run.failure or {}).get("code") == "context_refused"
    system: tuple[str, ...] = ()
    if turns and not refused:
        system = _compose_turns(run, turns)
    context.update(
        {
            "turns": turns,
            "refused": refused,
            "system": system,
            "budget": {
                "tool calls": f"{run.tool_calls_used} of {run.configuration.max_tool_calls}",
                "model turns": f"{len(turns)} of {settings.AGENTRUNS_MAX_TURNS}",
            },
        }
    )
    return context


def _compose_turns(run: Run, turns: list[timeline.Turn]) -> tuple[str, ...]:
    """Fills each turn's messages and tools from the thread's log before it (the live
    configuration's sources, as a resumed run would use: RG-2); returns the system texts."""
    config = build_runtime_config(run.configuration)
    _, sources = run_sources(run)
    rows = Event.objects.filter(thread=run.thread_id, sequence__lt=turns[-1].sequence)
    log = [Ev(*r) for r in rows.order_by("sequence").values_list("sequence", "type", "payload")]
    system: tuple[str, ...] = ()
    for turn in turns:
        before = [e for e in log if e.sequence < turn.sequence]
        mode = config.mode(thread_mode(before))
        effective = effective_events(before)
        composed = compose_request(
            sources=sources,
            mode=mode,
            active=active_deferred(effective, mode.deferred),
            events=effective,
        )
        turn.mode = mode.name
        turn.history = [message_dict(m) for m in composed.messages]
        turn.tools = [t.name for t in composed.tools]
        system = composed.system
    return system
