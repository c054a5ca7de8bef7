"""The two wire protocols the fake provider speaks (Chat Completions and Messages): what
the real APIs reject with a 400, and how a scripted item renders as their reply."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# status, JSON body, extra headers, how to misbehave on the wire ({} for not at all)
Answer = tuple[int, dict[str, Any], dict[str, str], dict[str, Any]]
Item = dict[str, Any] | Callable[[dict[str, Any], str], dict[str, Any]]

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SECRET_HEADERS = frozenset({"authorization", "x-api-key"})
OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
OPENAI_ERROR_TYPES = {401: "invalid_request_error", 429: "rate_limit_error"}
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-cased names; credentials only as "present"
    body: dict[str, Any] = field(default_factory=dict)


class Rejected(Exception):
    """What the real API answers 400 to."""


def signature(thinking: str) -> str:
    return "fake-sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:24]


# ---------------------------------------------------------------- Chat Completions


def _check_openai_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list) or not tools:
        raise Rejected("Invalid 'tools': empty array. Expected an array with minimum length 1.")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if tool.get("type") != "function" or not isinstance(name, str):
            raise Rejected(f"Missing required parameter: 'tools[{i}].function.name'.")
        if not TOOL_NAME.match(name):
            raise Rejected(
                f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
            )


def _openai_calls(i: int, message: dict[str, Any], seen: set[str]) -> list[str]:
    calls = message["tool_calls"]
    if not isinstance(calls, list) or not calls:
        raise Rejected(f"Invalid 'messages[{i}].tool_calls': empty array.")
    ids = []
    for j, call in enumerate(calls):
        function = call.get("function") or {}
        if not TOOL_NAME.match(str(function.get("name", ""))):
            raise Rejected(f"Invalid 'messages[{i}].tool_calls[{j}].function.name'.")
        if not isinstance(function.get("arguments"), str):
            raise Rejected(f"Invalid type for 'messages[{i}].tool_calls[{j}].function.arguments'.")
        if call.get("id") in seen:
            raise Rejected(f"Duplicate tool_call id {call.get('id')!r} in 'messages[{i}]'.")
        seen.add(call.get("id"))
        ids.append(call.get("id"))
    return ids


def _unanswered(pending: list[str]) -> Rejected:
    return Rejected(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(map(str, pending))
    )


def validate_openai(body: dict[str, Any]) -> None:
    if not body.get("model"):
        raise Rejected("you must provide a model parameter")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Rejected("Invalid 'messages': empty array. Expected an array with minimum length 1.")
    _check_openai_tools(body.get("tools"))
    if "tool_choice" in body and not body.get("tools"):
        raise Rejected(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
            "are specified."
        )
    pending: list[str] = []
    seen: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in OPENAI_ROLES:
            raise Rejected(f"Invalid value for 'messages[{i}].role': {role!r}.")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise Rejected(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            raise _unanswered(pending)
        if role == "assistant" and message.get("tool_calls") is not None:
            pending = _openai_calls(i, message, seen)
        elif role == "assistant" and message.get("content") is None:
            raise Rejected(f"Invalid value for 'messages[{i}].content': expected a string.")
    if pending:
        raise _unanswered(pending)


def _openai_arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {})


def render_openai(item: dict[str, Any], body: dict[str, Any], serial: int) -> dict[str, Any]:
    if "choices" in item:
        choices = item["choices"]
    else:
        calls = [
            {
                "id": call.get("id") or f"call_{serial}_{i}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": _openai_arguments(call.get("arguments")),
                },
            }
            for i, call in enumerate(item.get("tool_calls") or ())
        ]
        text = item.get("text") or ""
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
        if calls:
            message["tool_calls"] = calls
        message["refusal"] = None
        finish = item.get("finish_reason") or ("tool_calls" if calls else "stop")
        choices = [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]
    prompt, completion = _tokens(body, choices)
    return {
        "id": f"chatcmpl-fake{serial}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def openai_error(status: int, message: str) -> dict[str, Any]:
    kind = OPENAI_ERROR_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# ---------------------------------------------------------------- Messages


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(b, dict) for b in content):
        return content
    raise Rejected("messages: content must be a string or a list of content blocks")


def _check_anthropic_tools(tools: Any) -> None:
    for i, tool in enumerate(tools or ()):
        if not TOOL_NAME.match(str(tool.get("name", ""))):
            raise Rejected(
                f"tools.{i}.custom.name: String should match pattern '{TOOL_NAME.pattern}'"
            )


def _check_assistant(i: int, blocks: list[dict[str, Any]], seen: set[str]) -> set[str]:
    uses = set()
    for j, block in enumerate(blocks):
        if block.get("type") == "thinking" and block.get("signature") != signature(
            str(block.get("thinking"))
        ):
            raise Rejected(f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
        if block.get("type") != "tool_use":
            continue
        if not TOOL_NAME.match(str(block.get("name", ""))):
            raise Rejected(f"messages.{i}.content.{j}.name: String should match pattern")
        if block.get("id") in seen:
            raise Rejected(f"messages.{i}.content.{j}: `tool_use` ids must be unique")
        seen.add(block["id"])
        uses.add(block["id"])
    return uses


def _check_user(i: int, blocks: list[dict[str, Any]], uses: set[str]) -> set[str]:
    answered = set()
    text_seen = False
    for j, block in enumerate(blocks):
        if block.get("type") != "tool_result":
            text_seen = True
            continue
        if text_seen:
            raise Rejected(f"messages.{i}.content.{j}: `tool_result` blocks must come first")
        if block.get("tool_use_id") not in uses:
            raise Rejected(
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a "
                "corresponding `tool_use` block in the previous message."
            )
        answered.add(block["tool_use_id"])
    return answered


def _check_content(i: int, blocks: list[dict[str, Any]], final_assistant: bool) -> None:
    if not blocks and not final_assistant:
        raise Rejected(
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    if any(b.get("type") == "text" and not b.get("text") for b in blocks):
        raise Rejected(f"messages.{i}: text content blocks must be non-empty")


def _check_anthropic_roles(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise Rejected("messages: at least one message is required")
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            raise Rejected(
                'messages: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.'
            )
        if role not in ("user", "assistant"):
            raise Rejected(f"messages: Input tag {role!r} found using 'role' does not match")
    if messages[0]["role"] != "user":
        raise Rejected('messages: first message must use the "user" role')


def validate_anthropic(body: dict[str, Any]) -> None:
    if "max_tokens" not in body:
        raise Rejected("max_tokens: Field required")
    if not body.get("model"):
        raise Rejected("model: Field required")
    _check_anthropic_tools(body.get("tools"))
    messages = body.get("messages")
    _check_anthropic_roles(messages)
    assert isinstance(messages, list)
    uses: set[str] = set()
    seen: set[str] = set()
    for i, message in enumerate(messages):
        blocks = _blocks(message.get("content"))
        final = i == len(messages) - 1
        _check_content(i, blocks, final and message["role"] == "assistant")
        if message["role"] == "user":
            _check_user(i, blocks, uses)
            uses = set()
            continue
        uses = _check_assistant(i, blocks, seen)
        following = messages[i + 1] if not final else None
        answered = _answered(following)
        if uses - answered:
            raise _unpaired(i, uses - answered)


def _answered(message: dict[str, Any] | None) -> set[str]:
    if not message or message.get("role") != "user":
        return set()
    blocks = _blocks(message.get("content"))
    return {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}  # type: ignore[misc]


def _unpaired(i: int, ids: set[str]) -> Rejected:
    return Rejected(
        f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(sorted(ids))}. Each `tool_use` block must have a corresponding "
        "`tool_result` block in the next message."
    )


def _anthropic_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _anthropic_content(item: dict[str, Any], serial: int) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if item.get("thinking"):
        thinking = item["thinking"]
        content.append({"type": "thinking", "thinking": thinking, "signature": signature(thinking)})
    if item.get("redacted_thinking"):
        content.append({"type": "redacted_thinking", "data": item["redacted_thinking"]})
    if item.get("text"):
        content.append({"type": "text", "text": item["text"]})
    for i, call in enumerate(item.get("tool_calls") or ()):
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_fake{serial}_{i}",
                "name": call["name"],
                "input": _anthropic_input(call.get("arguments")),
            }
        )
    return content


def render_anthropic(item: dict[str, Any], body: dict[str, Any], serial: int) -> dict[str, Any]:
    content = _anthropic_content(item, serial)
    prompt, completion = _tokens(body, content)
    return {
        "id": f"msg_fake{serial}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": content,
        "stop_reason": item.get("stop_reason")
        or ("tool_use" if item.get("tool_calls") else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    kind = ANTHROPIC_ERROR_TYPES.get(
        status, "api_error" if status >= 500 else "invalid_request_error"
    )
    return {"type": "error", "error": {"type": kind, "message": message}}


def _tokens(body: dict[str, Any], output: Any) -> tuple[int, int]:
    """Cheap, stable figures: messages' and output's text length over four."""
    prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages") or ())
    return prompt // 4 + 1, len(json.dumps(output)) // 4 + 1


# ---------------------------------------------------------------- the server


def _bearer(headers: Any) -> str:
    value = headers.get("authorization") or ""
    return value[7:].strip() if value.startswith("Bearer ") else ""


def _anthropic_key(headers: Any) -> str:
    # The current SDK sends its key as a bearer token; older clients and curl use x-api-key.
    return (headers.get("x-api-key") or "").strip() or _bearer(headers)


@dataclass(frozen=True)
class Wire:
    validate: Callable[[dict[str, Any]], None]
    render: Callable[[dict[str, Any], dict[str, Any], int], dict[str, Any]]
    error: Callable[[int, str], dict[str, Any]]
    credential: Callable[[Any], str]
    required_headers: tuple[str, ...] = ()


WIRES = {
    OPENAI_PATH: Wire(validate_openai, render_openai, openai_error, _bearer),
    ANTHROPIC_PATH: Wire(
        validate_anthropic,
        render_anthropic,
        anthropic_error,
        _anthropic_key,
        ("anthropic-version",),
    ),
}
