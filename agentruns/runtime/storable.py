"""SEC-7: what a model or a tool hands the loop, made storable before anything is stored.

PostgreSQL refuses NUL in text and jsonb, unpaired UTF-16 surrogates cannot be encoded
at all, and jsonb has no NaN or Infinity. One such character in a reply would make the
step statement raise, and the run would retry the same reply until its attempts ran out.
So text is cleaned (each offending character becomes U+FFFD), and a call whose arguments
needed cleaning is refused with a model-visible error, since running a tool on altered
arguments would do something the model did not ask for. Plain functions over plain values.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from agentruns.providers.base import Reply, ToolCall
from agentruns.tools.registry import ToolOutput

REPLACEMENT = "\ufffd"
# Deeper than any real tool argument; bounded so walking a value can never recurse out.
MAX_DEPTH = 64

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
NUL = "a NUL character"
SURROGATE = "an unpaired surrogate"
NOT_FINITE = "a value that is not a finite number (NaN or Infinity)"
TOO_DEEP = f"values nested deeper than {MAX_DEPTH} levels"


def storable_text(text: str) -> str:
    return _clean(text, set())


def _clean(text: str, found: set[str]) -> str:
    if not _UNSTORABLE.search(text):  # the common case: one scan, no copy
        return text
    # JSON and UTF-8 decoding join a well-formed pair into one code point, so a surrogate
    # code point left in a str is unpaired, and UTF-8 cannot encode it.
    found.update(NUL if char == "\x00" else SURROGATE for char in _UNSTORABLE.findall(text))
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable_value(value: Any, found: set[str] | None = None, depth: int = 0) -> Any:
    """A JSON value PostgreSQL's jsonb accepts; what had to change is added to `found`."""
    found = set() if found is None else found
    if isinstance(value, str):
        return _clean(value, found)
    if isinstance(value, float) and not math.isfinite(value):
        found.add(NOT_FINITE)
        return None
    if isinstance(value, dict | list | tuple) and depth >= MAX_DEPTH:
        found.add(TOO_DEEP)
        return None
    if isinstance(value, dict):
        return {
            _clean(str(key), found): storable_value(item, found, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [storable_value(item, found, depth + 1) for item in value]
    return value


def unstorable_arguments(problems: set[str]) -> str:
    """The model-visible result of a call refused for what its arguments held."""
    return (
        f"Error: the arguments hold {', '.join(sorted(problems))}, which cannot be stored; "
        "nothing was run. Send the call again without them."
    )


def storable_reply(reply: Reply) -> tuple[Reply, dict[str, set[str]]]:
    """The reply with every string cleaned, and per (cleaned) call id what its arguments
    held that had to change: those calls are refused, never run."""
    calls = []
    refused: dict[str, set[str]] = {}
    for call in reply.tool_calls:
        found: set[str] = set()
        arguments = storable_value(call.arguments, found) if call.arguments is not None else None
        raw = _clean(call.raw_arguments, found) if call.raw_arguments is not None else None
        cleaned = ToolCall(storable_text(call.id), storable_text(call.name), arguments, raw)
        if found:
            refused[cleaned.id] = found
        calls.append(cleaned)
    cleaned_reply = dataclasses.replace(
        reply,
        text=storable_text(reply.text),
        tool_calls=tuple(calls),
        continuation=storable_value(reply.continuation),
        provider=storable_text(reply.provider),
        model=storable_text(reply.model),
    )
    return cleaned_reply, refused


def storable_output(output: ToolOutput) -> ToolOutput:
    """A tool's result cleaned like a reply's text; its structured data too."""
    return dataclasses.replace(
        output, content=storable_text(output.content), data=storable_value(output.data)
    )
