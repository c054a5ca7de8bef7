"""Chat Completions through the official `openai` SDK: OpenAI and every compatible server
(vLLM, Ollama, llama.cpp, OpenRouter) differ only in base URL and key."""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.types.chat import ChatCompletion

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


def _build(base_url: str, api_key: str, timeout: float, max_retries: int) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=api_key,
        # None lets the SDK apply OPENAI_BASE_URL or its default, as the operator expects.
        base_url=base_url or None,
        timeout=timeout,
        max_retries=max_retries,
        http_client=openai.DefaultHttpxClient(transport=DeadlineTransport(seconds=timeout)),
    )


def encode_arguments(call: ToolCall) -> str:
    if call.arguments is None:
        return call.raw_arguments or ""
    return json.dumps(call.arguments)


def decode_arguments(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """The model's text is kept verbatim when it is not a JSON object (SEC-3 decides later)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # nested past the parser's limit: not usable
        return None, raw
    return (value, None) if isinstance(value, dict) else (None, raw)


def _assistant(message: AssistantMessage) -> dict[str, Any]:
    if not message.tool_calls:
        return {"role": "assistant", "content": message.text}
    calls = [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": encode_arguments(call)},
        }
        for call in message.tool_calls
    ]
    # INT-1: "" is what every compatible server accepts; llama.cpp's answers 500 to null.
    return {"role": "assistant", "content": message.text, "tool_calls": calls}


def to_messages(request: ProviderRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": s} for s in request.system]
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            messages.append(_assistant(message))
        else:
            messages.append(_tool_result(message))
    return messages


def _tool_result(message: ToolResultMessage) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}


def to_tools(request: ProviderRequest) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in request.tools
    ]


def _tool_call(link: Link, index: int, call: Any) -> ToolCall:
    """INT-2: a call the loop cannot pair (no id), route (no name) or read (arguments not
    text) is a malformed reply, never a call dropped or a crash further on. The SDK does
    not validate replies, so every field is checked here."""
    function = getattr(call, "function", None)
    name = getattr(function, "name", None)
    text = getattr(function, "arguments", None)
    problem = ""
    if getattr(call, "type", None) != "function":
        problem = f'its type is {getattr(call, "type", None)!r}, not "function"'
    elif not isinstance(getattr(call, "id", None), str) or not call.id:
        problem = "it has no id"
    elif not isinstance(name, str) or not name:
        problem = "it has no function name"
    elif not isinstance(text, str):
        problem = "its arguments are not a JSON text"
    if problem:
        raise MalformedReply(f"{link.where}: tool call {index} of the reply is unusable: {problem}")
    assert isinstance(name, str) and isinstance(text, str)
    arguments, raw = decode_arguments(text)
    return ToolCall(call.id, name, arguments, raw)


def parse_reply(link: Link, response: ChatCompletion) -> Reply:
    if not response.choices:
        raise MalformedReply(f"{link.where} returned no choices.")
    choice = response.choices[0]
    message = choice.message
    if choice.finish_reason == "length":
        bound = f" (max_output_tokens {link.max_output_tokens})" if link.max_output_tokens else ""
        raise TruncatedReply(
            f"{link.where}: the reply was cut at its output bound{bound} or the server's "
            "context window; nothing of it was used."
        )
    calls = tuple(_tool_call(link, i, call) for i, call in enumerate(message.tool_calls or ()))
    usage = response.usage
    return Reply(
        text=message.content or message.refusal or "",
        tool_calls=calls,
        usage={"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}
        if usage
        else {},
        provider=link.provider_slug or link.provider_kind,
        model=response.model or link.model,
    )


def provider_error(link: Link, error: openai.OpenAIError, api_key: str) -> ProviderError:
    """TZ-5 mapping; the SDK's message may quote the response body, so it is scrubbed.
    INT-2: the text says where (the provider and host)."""
    who = link.where
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        detail = scrub_credential(error.message, api_key)
        if status == 404 and not link.base_url.rstrip("/").endswith("/v1"):
            detail += " (compatible servers usually serve under /v1: is it in the base URL?)"
        return ProviderError(
            f"{who}: HTTP {status}: {detail}"[:2000],
            retryable=retryable_status(status),
            status=status,
        )
    if isinstance(error, openai.APIConnectionError):
        return ProviderError(
            f"{who}: {type(error).__name__}: {error.message} "
            f"({link.base_url.strip() or 'the SDK default endpoint'})",
            retryable=True,
        )
    if isinstance(error, openai.APIResponseValidationError):
        return MalformedReply(f"{who}: the reply did not match the Chat Completions schema.")
    return ProviderError(f"{who}: {scrub_credential(str(error), api_key)}", retryable=False)


def request_options(link: Link, request: ProviderRequest) -> dict[str, Any]:
    """INT-1: the provider's options. llama.cpp's server leaves tools out of the prompt
    unless `tool_choice` is sent; vLLM refuses "auto" unless started to accept it.
    LOOP-6: once the run's tool calls are spent, "none" is asked for instead; a provider
    that sends no `tool_choice` (omit) leaves the tools out, the one way left to say it."""
    options: dict[str, Any] = {}
    if request.tools and not (request.tools_spent and link.tool_choice == "omit"):
        options["tools"] = to_tools(request)
        if link.tool_choice != "omit":
            options["tool_choice"] = "none" if request.tools_spent else link.tool_choice
    if link.max_output_tokens:
        # max_tokens, not max_completion_tokens: every compatible server reads this one.
        options["max_tokens"] = link.max_output_tokens
    if link.extra_body:
        options["extra_body"] = dict(link.extra_body)
    return options


class OpenAIAdapter:
    def __init__(self) -> None:
        self._clients: ClientCache[openai.OpenAI] = ClientCache(_build)

    def complete(self, link: Link, request: ProviderRequest) -> Reply:
        api_key = api_key_for(link)
        client = self._clients.for_link(link, api_key)
        try:
            response = client.chat.completions.create(
                model=request.model,
                messages=to_messages(request),  # type: ignore[arg-type]
                **request_options(link, request),
            )
        except openai.OpenAIError as error:
            # Not chained: the SDK error's text may quote the request or the key.
            raise provider_error(link, error, api_key) from None
        except (ValueError, RecursionError):  # a reply whose body is no usable JSON (SEC-3)
            raise MalformedReply(f"{link.where} sent a reply that is not JSON.") from None
        return parse_reply(link, response)
