"""A deterministic provider for demos, tests and benchmarks: it replays `link.script`.

{"turns": [{"text": "...", "tool_calls": [{"name": "notes.write", "arguments": {...}}]},
           {"error": {"status": 503, "message": "overloaded"}}, ...],
 "latency_ms": 1000, "summary": "..."}
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

from agentruns.providers.base import (
    AssistantMessage,
    Link,
    Message,
    ProviderError,
    ProviderRequest,
    Reply,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    retryable_status,
)
from agentruns.providers.tokens import recurring_count, text_tokens
from agentruns.tools.names import wire_name

FINISHED = "(script finished)"


# A derived call id: the prompt's prefix, the turn, the call's place in it.
DERIVED_ID = re.compile(r"^call_(?P<prefix>[0-9a-f]+)_(?P<turn>\d+)_\d+$")


def position(request: ProviderRequest) -> tuple[str, int]:
    """(id prefix, turn): where in the script this request is, read from the request alone,
    as a real provider would. The turn is one after the newest assistant turn's, which its
    derived call ids carry, so the count survives a compaction that summarised the
    earlier turns away; failing that, the assistant turns since the last prompt. A
    prompt's first turn takes a prefix from a digest of the history, so ids stay unique
    within a thread."""
    turns, newest = 0, None
    for message in request.messages:
        if isinstance(message, UserMessage):
            turns, newest = 0, None
        elif isinstance(message, AssistantMessage):
            turns, newest = turns + 1, message
    for call in newest.tool_calls if newest else ():
        derived = DERIVED_ID.match(call.id)
        if derived:
            return derived["prefix"], int(derived["turn"]) + 1
    history = [[type(m).__name__, _wire_text(m)] for m in request.messages]
    return hashlib.sha256(json.dumps(history).encode()).hexdigest()[:8], turns


def _calls(item: dict[str, Any], prefix: str, turn: int) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(
            id=call.get("id") or f"call_{prefix}_{turn}_{i}",
            name=wire_name(call["name"]),
            arguments=dict(call.get("arguments") or {}),
        )
        for i, call in enumerate(item.get("tool_calls") or ())
    )


def _raise(link: Link, error: dict[str, Any]) -> None:
    status = int(error.get("status", 500))
    message = error.get("message") or f"scripted HTTP {status}"
    raise ProviderError(
        f"Provider {link.provider_slug or link.slug!r}: HTTP {status}: {message}",
        retryable=retryable_status(status),
        status=status,
    )


def _calls_text(calls: tuple[ToolCall, ...]) -> str:
    return "".join(f"{c.name}{c.raw_arguments or c.arguments}" for c in calls)


def _wire_text(message: Message) -> str:
    if isinstance(message, ToolResultMessage):
        return message.content
    if isinstance(message, AssistantMessage):
        return message.text + _calls_text(message.tool_calls)
    return message.text


# A message's tokens by the message object, which the entry keeps alive (so its id is not
# reused while remembered): a run's history comes back in every request of the run, and
# an assistant message's wire text is rebuilt to be counted. Bounded; forgetting costs a
# count again.
_COUNTED: dict[int, tuple[Message, int]] = {}
_COUNTED_LIMIT = 10_000


def _message_tokens(message: Message) -> int:
    known = _COUNTED.get(id(message))
    if known is not None:
        return known[1]
    if len(_COUNTED) >= _COUNTED_LIMIT:
        _COUNTED.clear()
    tokens = text_tokens(_wire_text(message))
    _COUNTED[id(message)] = (message, tokens)
    return tokens


def _usage(request: ProviderRequest, text: str, calls: tuple[ToolCall, ...]) -> dict[str, int]:
    """OPS-1: the scripted provider reports what tiktoken counts, as a real one would."""
    sent = sum(text_tokens(t) for t in request.system) + sum(
        _message_tokens(m) for m in request.messages
    )
    said = text + _calls_text(calls)
    return {"input_tokens": sent, "output_tokens": recurring_count(said) if said else 0}


class ScriptedAdapter:
    def complete(self, link: Link, request: ProviderRequest) -> Reply:
        script = link.script or {}
        if script.get("latency_ms"):
            time.sleep(script["latency_ms"] / 1000)
        if request.purpose == "summary":
            text = script.get("summary") or f"Summary of {len(request.messages)} earlier messages."
            return self._reply(link, request, text)
        prefix, turn = position(request)
        turns = script.get("turns") or []
        if turn >= len(turns):
            return self._reply(link, request, FINISHED)
        item = turns[turn]
        if "error" in item:
            _raise(link, item["error"])
        return self._reply(link, request, item.get("text") or "", _calls(item, prefix, turn))

    @staticmethod
    def _reply(
        link: Link, request: ProviderRequest, text: str, calls: tuple[ToolCall, ...] = ()
    ) -> Reply:
        return Reply(
            text=text,
            tool_calls=calls,
            usage=_usage(request, text, calls),
            provider=link.provider_slug or "scripted",
            model=request.model or "scripted",
        )
