"""The provider interface: neutral messages in, one assistant turn out.

Adapters translate to a wire protocol with the official SDKs; nothing above this module
knows a protocol. Tool names here are *wire names* (`^[a-zA-Z0-9_-]{1,64}$`); the runtime
maps them to registry names.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

from agentruns.frozen import quick
from agentruns.gate.core import Hop
from agentruns.models import Configuration
from agentruns.models.catalog import key_env_problem


@dataclass(frozen=True)
class Link(Hop):
    """A hop of the chain with what the dispatcher needs to attempt it (TZ-4)."""

    model: str = ""
    provider_slug: str | None = None
    provider_kind: str = ""
    base_url: str = ""
    api_key_env: str = ""
    timeout_seconds: float = 60.0
    max_retries: int = 2
    script: dict | None = None
    dispatchable: bool = True
    # INT-1: the provider's options for OpenAI-compatible servers.
    tool_choice: str = "auto"
    max_output_tokens: int | None = None
    context_window_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """INT-2: the provider and the host a failure happened at, for its detail."""
        host = urlsplit(self.base_url.strip()).netloc if self.base_url.strip() else ""
        return f"Provider {self.provider_slug or self.slug!r}" + (f" at {host}" if host else "")


def link_for(configuration: Configuration) -> Link:
    provider = configuration.provider
    return Link(
        slug=configuration.slug,
        model=configuration.model,
        provider_slug=provider.slug if provider else None,
        provider_kind=provider.kind if provider else "",
        provider_zone=provider.trust_zone if provider else None,
        base_url=provider.base_url if provider else "",
        api_key_env=provider.api_key_env if provider else "",
        timeout_seconds=provider.timeout_seconds if provider else 60.0,
        max_retries=provider.max_retries if provider else 0,
        script=configuration.script or None,
        dispatchable=bool(configuration.active and provider and provider.active),
        version=configuration.version,
        provider_version=provider.version if provider else 0,
        tool_choice=provider.tool_choice if provider else "auto",
        max_output_tokens=provider.max_output_tokens if provider else None,
        context_window_tokens=provider.context_window_tokens if provider else None,
        extra_body=dict(provider.extra_body)
        if provider and isinstance(provider.extra_body, dict)
        else {},
    )


@quick
@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None
    # The model's own text when it is not a JSON object; kept to replay it faithfully.
    raw_arguments: str | None = None


@quick
@dataclass(frozen=True, slots=True)
class UserMessage:
    text: str


@quick
@dataclass(frozen=True, slots=True)
class AssistantMessage:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@quick
@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    call_id: str
    name: str
    content: str
    is_error: bool = False


Message = UserMessage | AssistantMessage | ToolResultMessage


@quick
@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@quick
@dataclass(frozen=True, slots=True)
class ProviderRequest:
    model: str
    system: tuple[str, ...]
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    # Opaque provider data for the newest assistant turn (e.g. signed reasoning blocks).
    continuation: Any = None
    max_tokens: int = 4096
    # LOOP-6: the run's `max_tool_calls` are used up. The tools stay defined (the history's
    # calls refer to them) but the model is told to call none, so a `tool_choice` of
    # "required" cannot force calls that would only be refused, turn after turn.
    tools_spent: bool = False
    # "turn" asks for the next assistant turn; "summary" asks to summarise the messages
    # for compaction (DEF-6), which the scripted provider answers deterministically.
    purpose: str = "turn"


@quick
@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    continuation: Any = None
    usage: dict[str, int] = field(default_factory=dict)
    provider: str = ""
    model: str = ""

    @property
    def size(self) -> int:
        """Characters of model output: the text and every call's arguments (SEC-3)."""
        return len(self.text) + sum(
            len(call.raw_arguments or "") + len(json.dumps(call.arguments or {}))
            for call in self.tool_calls
        )

    @property
    def token_usage(self) -> dict[str, int]:
        """OPS-1's `usage` as the log records it; a provider that reported none counts 0."""
        return {
            "input_tokens": int(self.usage.get("input_tokens") or 0),
            "output_tokens": int(self.usage.get("output_tokens") or 0),
        }


class ProviderError(Exception):
    """A failed provider call. `retryable` decides whether the fallback chain is tried
    (TZ-5: connection, timeout, 429 and 5xx are; any other 4xx is not)."""

    code = "provider_error"

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class TruncatedReply(ProviderError):
    """INT-2: the reply was cut by its output bound; half a sentence is no final answer."""

    code = "provider_reply_truncated"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class KeyEnvRefused(ProviderError):
    """SEC-5: the provider names a variable that may not hold a key (a row saved before the
    rule, or written around the admin): nothing is read, nothing is sent."""

    code = "provider_key_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class MalformedReply(ProviderError):
    """The provider answered, but not with a usable turn (e.g. no choices)."""

    code = "provider_malformed_reply"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class Adapter(Protocol):
    def complete(self, link: Link, request: ProviderRequest) -> Reply: ...


def retryable_status(status: int) -> bool:
    """TZ-5: 429 and 5xx may succeed elsewhere; any other 4xx would fail everywhere."""
    return status == 429 or status >= 500


# Local OpenAI-compatible servers need no key, but the SDKs refuse to start without one.
NO_KEY = "unused"


def api_key_for(link: Link) -> str:
    """SEC-1: a provider names an environment variable; the key itself is never stored."""
    name = link.api_key_env.strip()
    if not name:
        return NO_KEY
    problem = key_env_problem(name)
    if problem:
        raise KeyEnvRefused(f"Provider {link.provider_slug or link.slug!r}: {problem}")
    key = os.environ.get(name)
    if not key:
        raise ProviderError(
            f"Provider {link.provider_slug or link.slug!r}: environment variable {name} "
            "(its api_key_env) is not set.",
            retryable=False,
        )
    return key


def scrub_credential(text: str, secret: str) -> str:
    """Error bodies may echo the credential back (OpenAI's 401 does, partly)."""
    return text.replace(secret, "[redacted]") if secret and secret != NO_KEY else text


C = TypeVar("C")


class ClientCache(Generic[C]):
    """SDK clients are costly to build and safe to share across threads: one per settings."""

    def __init__(self, factory: Callable[..., C], limit: int = 64) -> None:
        self._factory = factory
        self._limit = limit
        self._clients: dict[Hashable, C] = {}
        self._lock = threading.Lock()

    def get(self, **settings: Any) -> C:
        key = tuple(sorted(settings.items()))
        client = self._clients.get(key)
        if client is not None:
            return client
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                if len(self._clients) >= self._limit:
                    # Rotated keys leave stale entries; dropping one only costs a rebuild.
                    self._clients.pop(next(iter(self._clients)))
                client = self._clients[key] = self._factory(**settings)
            return client

    def for_link(self, link: Link, api_key: str) -> C:
        return self.get(
            base_url=link.base_url.strip(),
            api_key=api_key,
            timeout=float(link.timeout_seconds),
            max_retries=int(link.max_retries),
        )
