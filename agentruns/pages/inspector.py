"""The playground inspector: the run page's live facts plus, per model turn, what it was
sent (system texts, conversation, tools offered), its reply and its tool calls."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agentruns.models import Event, Run
from agentruns.pages import timeline
from agentruns.pages.runs import live_context
from agentruns.runtime.config import build_runtime_config
from agentruns.runtime.context import system_texts
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.redaction import redact
from agentruns.runtime.state import Ev
from agentruns.selectors import run_sources
from agentruns.services.runs import thread_mode
from agentruns.tools.policy import deferred_catalog, offered_tools


def inspector_context(run: Run) -> dict[str, Any]:
    context = live_context(run)
    events: list[Event] = context["events"]
    config = build_runtime_config(run.configuration)
    mode = config.mode(thread_mode(run.thread))
    turns = timeline.turns(run, events)
    for turn in turns:
        before = [Ev(e.sequence, e.type, e.payload, e.run_id) for e in events[: turn.index]]
        turn.tools = [t.name for t in offered_tools(mode, active_deferred(before, mode.deferred))]
    # A refused run sent nothing, and a refusal never shows a source's text (CG-7).
    refused = (run.failure or {}).get("code") == "context_refused"
    system: list[str] = []
    if not refused:
        # CG-11: what a send carries is redacted first; shown the same way.
        system = [redact(t)[0] for t in system_texts(run_sources(run)[1])]
        system += deferred_catalog(mode)
    context.update(
        {
            "turns": turns,
            "mode": mode.name,
            "refused": refused,
            "system": system,
            "budget": {
                "tool calls": f"{run.tool_calls_used} of {run.configuration.max_tool_calls}",
                "model turns": f"{len(turns)} of {settings.AGENTRUNS_MAX_TURNS}",
            },
        }
    )
    return context
