"""The Messages API through the official `anthropic` SDK."""

from __future__ import annotations

from typing import Any

import anthropic
from anthropic.types import Message

from agentruns.providers.base import (
    AssistantMessage,
    ClientCache,
    Link,
    MalformedReply,
    ProviderError,
    ProviderRequest,
    Reply,
    ToolCall,
    ToolResultMessage,
    TruncatedReply,
    UserMessage,
    api_key_for,
    retryable_status,
    scrub_credential,
)
from agentruns.providers.http import DeadlineTransport

REASONING = frozenset({"thinking", "redacted_thinking"})


def _build(base_url: str, api_key: str, timeout: float, max_retries: int) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=api_key,
        base_url=base_url or None,
        timeout=timeout,
        max_retries=max_retries,
        http_client=anthropic.DefaultHttpxClient(transport=DeadlineTransport(seconds=timeout)),
    )


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text else []
    for call in message.tool_calls:
        # Anthropic itself only ever sends objects; an OpenAI turn's bad JSON becomes {}.
        args = call.arguments if call.arguments is not None else {}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": args})
    return blocks


def _user_blocks(message: UserMessage | ToolResultMessage) -> list[dict[str, Any]]:
    if isinstance(message, UserMessage):
        return [{"type": "text", "text": message.text}]
    return [
        {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": message.content,
            "is_error": message.is_error,
        }
    ]


def _append_user(messages: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Anthropic wants all results of a turn in one user message, ahead of any text."""
    if messages and messages[-1]["role"] == "user":
        merged = messages[-1]["content"] + blocks
        results = [b for b in merged if b["type"] == "tool_result"]
        texts = [b for b in merged if b["type"] != "tool_result" and (b["text"] or not results)]
        messages[-1]["content"] = results + texts
    else:
        messages.append({"role": "user", "content": blocks})


def _last_assistant(request: ProviderRequest) -> int:
    indexes = [i for i, m in enumerate(request.messages) if isinstance(m, AssistantMessage)]
    return indexes[-1] if indexes else -1


def to_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    last = _last_assistant(request)
    for index, message in enumerate(request.messages):
        if not isinstance(message, AssistantMessage):
            _append_user(messages, _user_blocks(message))
            continue
        keep = index == last and isinstance(request.continuation, list)
        content = request.continuation if keep else _assistant_blocks(message)
        if content:  # an empty turn carries nothing and the API rejects empty content
            messages.append({"role": "assistant", "content": content})
    return [_collapse(m) for m in messages]


def _collapse(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if message["role"] == "user" and len(content) == 1 and content[0]["type"] == "text":
        return {"role": "user", "content": content[0]["text"]}
    return message


def to_tools(request: ProviderRequest) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in request.tools
    ]


def parse_reply(link: Link, response: Message) -> Reply:
    if response.stop_reason == "max_tokens":  # INT-2
        raise TruncatedReply(f"{link.where}: the reply was cut at its output bound.")
    text = "".join(block.text for block in response.content if block.type == "text")
    calls = tuple(
        ToolCall(block.id, block.name, dict(block.input))
        for block in response.content
        if block.type == "tool_use"
    )
    continuation = None
    if any(block.type in REASONING for block in response.content):
        # Signed reasoning must come back byte-for-byte with the tool results that follow.
        continuation = [
            block.model_dump(mode="json", exclude_unset=True, exclude_none=True)
            for block in response.content
        ]
    return Reply(
        text=text,
        tool_calls=calls,
        continuation=continuation,
        usage={
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
        provider=link.provider_slug or link.provider_kind,
        model=response.model or link.model,
    )


def provider_error(link: Link, error: anthropic.AnthropicError, api_key: str) -> ProviderError:
    """TZ-5 mapping (529 overloaded is a 5xx); the body may quote the request, so scrub."""
    who = link.where
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        detail = scrub_credential(error.api_message or error.message, api_key)[:2000]
        return ProviderError(
            f"{who}: HTTP {status}: {detail}", retryable=retryable_status(status), status=status
        )
    if isinstance(error, anthropic.APIConnectionError):
        return ProviderError(f"{who}: {type(error).__name__}: connection failed", retryable=True)
    if isinstance(error, anthropic.APIResponseValidationError):
        return MalformedReply(f"{who}: the reply did not match the Messages schema.")
    return ProviderError(f"{who}: {scrub_credential(str(error), api_key)}", retryable=False)


class AnthropicAdapter:
    def __init__(self) -> None:
        self._clients: ClientCache[anthropic.Anthropic] = ClientCache(_build)

    def complete(self, link: Link, request: ProviderRequest) -> Reply:
        api_key = api_key_for(link)
        client = self._clients.for_link(link, api_key)
        extra: dict[str, Any] = {}
        if request.system:
            extra["system"] = "\n\n".join(request.system)
        if request.tools:
            # Kept when spent: Messages refuses tool_use blocks with no tools defined.
            extra["tools"] = to_tools(request)
            if request.tools_spent:  # LOOP-6
                extra["tool_choice"] = {"type": "none"}
        try:
            response = client.messages.create(
                model=request.model,
                messages=to_messages(request),  # type: ignore[arg-type]
                max_tokens=link.max_output_tokens or request.max_tokens,
                **extra,
            )
        except anthropic.AnthropicError as error:
            # Not chained: the SDK error's text may quote the request or the key.
            raise provider_error(link, error, api_key) from None
        except (ValueError, RecursionError):  # a reply whose body is no usable JSON (SEC-3)
            raise MalformedReply(f"{link.where} sent a reply that is not JSON.") from None
        return parse_reply(link, response)
