"""The playground inspector: the run page's live facts plus, per model turn, the request it
was sent (system texts, conversation, tools offered) composed from the log exactly as the
loop composes it, its reply and its tool calls, each result marked if the next send
withholds it (MCP-4)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agentruns import events as ev
from agentruns.models import Run
from agentruns.selectors import run_next_send, turn_requests
from agentruns.services.runs import message_dict
from playground import timeline
from playground.runs import live_context


def inspector_context(run: Run) -> dict[str, Any]:
    context = live_context(run)
    next_send = run_next_send(run)
    withheld = {r.sequence: r.data_class.label for r in next_send.withheld if r.data_class}
    turns = timeline.turns(run, context["events"], withheld)
    # A refused run sent nothing, and a refusal never shows a source's text (CG-7).
    refused = (run.failure or {}).get("code") == "context_refused"
    system: tuple[str, ...] = ()
    if turns and not refused:
        system = _compose_turns(run, turns)
    context.update(
        {
            "turns": turns,
            "refused": refused,
            "ceiling": next_send.ceiling.label,
            "system": system,
            "budget": {
                "tool calls": context["counters"]["tool calls"],
                "model turns": f"{len(turns)} of {settings.AGENTRUNS_MAX_TURNS}",
            },
        }
    )
    return context


def _compose_turns(run: Run, turns: list[timeline.Turn]) -> tuple[str, ...]:
    """Fills each turn's messages and tools; returns the last turn's system texts."""
    records = [ev.SentRecord.parse(turn.sent) for turn in turns]
    requests = turn_requests(run, [turn.sequence for turn in turns], records)
    for turn, request in zip(turns, requests, strict=True):
        turn.mode = request.mode
        turn.history = [message_dict(m) for m in request.messages]
        turn.tools = list(request.tools)
    return requests[-1].system if requests else ()
