"""The fallback dispatcher (TZ-5): the chain in order, moving on only on retryable errors."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence

from agentruns.providers.base import Adapter, Link, ProviderError, ProviderRequest, Reply

log = logging.getLogger(__name__)

_adapters: dict[str, Adapter] = {}
_lock = threading.Lock()


def _create(kind: str) -> Adapter:
    # Imported lazily so a scripted-only process never loads an SDK.
    if kind == "openai":
        from agentruns.providers.openai_adapter import OpenAIAdapter

        return OpenAIAdapter()
    if kind == "anthropic":
        from agentruns.providers.anthropic_adapter import AnthropicAdapter

        return AnthropicAdapter()
    if kind == "scripted":
        from agentruns.providers.scripted import ScriptedAdapter

        return ScriptedAdapter()
    raise ProviderError(f"Unknown provider kind {kind!r}.", retryable=False)


def adapter_for(kind: str) -> Adapter:
    """One adapter per kind per process, so their client caches are shared."""
    adapter = _adapters.get(kind)
    if adapter is None:
        with _lock:
            adapter = _adapters.get(kind)
            if adapter is None:
                adapter = _adapters[kind] = _create(kind)
    return adapter


def _attempt(link: Link, request: ProviderRequest) -> Reply:
    # A continuation is `{"link": slug, "data": ...}`: signed provider data only ever goes
    # back to the configuration that produced it.
    continuation = request.continuation
    data = continuation.get("data") if isinstance(continuation, dict) else None
    model = link.model or request.model
    own_continuation = data if data is not None and continuation["link"] == link.slug else None
    own = request
    if model != request.model or own_continuation is not continuation:
        own = dataclasses.replace(request, model=model, continuation=own_continuation)
    return adapter_for(link.provider_kind).complete(link, own)


def dispatch(chain: Sequence[Link], request: ProviderRequest) -> tuple[Reply, Link]:
    """The reply and the link that produced it; TZ-5: a 4xx is raised, never fallen back on."""
    links = [link for link in chain if link.dispatchable]
    if not links:
        names = ", ".join(link.slug for link in chain) or "none"
        raise ProviderError(
            f"No configuration in the chain can be called ({names}).", retryable=False
        )
    last: ProviderError | None = None
    for index, link in enumerate(links):
        try:
            return _attempt(link, request), link
        except ProviderError as error:
            if not error.retryable:
                raise
            last = error
            if index + 1 < len(links):
                log.warning(
                    "Provider call for %r failed (%s); falling back to %r.",
                    link.slug,
                    error,
                    links[index + 1].slug,
                )
    assert last is not None
    raise last
