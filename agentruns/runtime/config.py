"""The configuration as the runtime uses it, cached per catalog generation so the gate
still sees the live configuration on every send (CG-9) without reloading it each time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from agentruns.classes import DataClass, Zone
from agentruns.gate.core import ConfigView, Source, reachable_zone
from agentruns.gate.lookups import carried_for_send, config_view, forced_for_resume
from agentruns.models import Configuration
from agentruns.providers.base import Link, link_for
from agentruns.tools.mcp.pinned import forget_pinned, sync_pinned
from agentruns.tools.policy import Mode, modes_from
from agentruns.tools.registry import DELEGATE_TOOL, REGISTRY, digest


@dataclass(frozen=True)
class RuntimeConfig:
    view: ConfigView
    granted: frozenset[str]
    exempt: frozenset[str]
    modes: tuple[Mode, ...]
    max_tool_calls: int
    approval_timeout_seconds: int
    context_budget_tokens: int
    require_second_approver: bool
    active: bool
    daily_token_limit: int | None = None  # OPS-2
    tool_timeout_seconds: float = 30.0  # MCP-3
    delegates: tuple[str, ...] = ()  # DEL-1: configuration slugs agent.delegate may name

    @property
    def id(self) -> int:
        return self.view.id

    @property
    def slug(self) -> str:
        return self.view.slug

    @cached_property
    def links(self) -> tuple[Link, ...]:
        """The chain with how to reach each provider (built with `link_for`)."""
        links = tuple(hop for hop in self.view.chain if isinstance(hop, Link))
        assert len(links) == len(self.view.chain), "the view was built without link_for"
        return links

    @property
    def model(self) -> str:
        return self.links[0].model

    @cached_property
    def send_budget_tokens(self) -> int:
        """DEF-6's bound on a send: the configuration's budget, and (INT-1) what the
        smallest context window of the chain leaves once the reply's bound is kept free."""
        windows = [
            link.context_window_tokens - (link.max_output_tokens or 0)
            for link in self.links
            if link.context_window_tokens
        ]
        return max(1, min([self.context_budget_tokens, *windows]))

    @cached_property
    def zone(self) -> Zone:
        return reachable_zone(self.view)

    @property
    def ceiling(self) -> DataClass:
        return self.zone.ceiling

    def mode(self, name: str | None) -> Mode:
        for mode in self.modes:
            if mode.name == name:
                return mode
        return self.modes[0]

    def has_mode(self, name: str) -> bool:
        return any(mode.name == name for mode in self.modes)

    @cached_property
    def snapshot_id(self) -> str:
        """HITL-2: a digest of the configuration as executed."""
        view = self.view
        return digest(
            {
                "configuration": view.slug,
                "chain": [[link.slug, link.provider_slug, link.model] for link in self.links],
                "system_prompt": digest(view.system_prompt),
                "sources": [[s.kind, s.id, s.declared] for s in (*view.snippets, *view.skills)],
                "granted": sorted(self.granted),
                "exempt": sorted(self.exempt),
                "modes": [[m.name, m.core, m.deferred] for m in self.modes],
                "max_tool_calls": self.max_tool_calls,
                "delegates": list(self.delegates),
            }
        )


def build_runtime_config(
    configuration: Configuration, generation: int | None = None
) -> RuntimeConfig:
    """`generation`: the catalog generation the caller knows (the executor's); without it
    the pinned MCP tools are checked against the live one (MCP-2)."""
    sync_pinned(generation)
    delegates = tuple(configuration.delegates.values_list("slug", flat=True))
    granted = REGISTRY.expand(configuration.allowed_tools or [])
    modes = modes_from(configuration.modes, configuration.allowed_tools or [])
    if delegates:  # DEL-1: delegates grant agent.delegate, offered in every mode
        granted.add(DELEGATE_TOOL)
        modes = tuple(Mode(mode.name, (*mode.core, DELEGATE_TOOL), mode.deferred) for mode in modes)
    return RuntimeConfig(
        view=config_view(configuration, hop=link_for),
        granted=frozenset(granted),
        exempt=frozenset(configuration.approval_exempt_tools or []),
        modes=modes,
        delegates=delegates,
        max_tool_calls=configuration.max_tool_calls,
        approval_timeout_seconds=configuration.approval_timeout_seconds,
        context_budget_tokens=configuration.context_budget_tokens,
        require_second_approver=configuration.require_second_approver,
        active=configuration.active,
        daily_token_limit=configuration.daily_token_limit,
        tool_timeout_seconds=configuration.tool_timeout_seconds,
    )


K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class GenerationCache(Generic[K, T]):
    """Values by key, each as loaded at one catalog generation: a caller at a newer
    generation loads it again (CG-9), and threads that miss one key together wait for the
    first one's load rather than each paying it (PERF-6: a burst of runs starting at once
    built the same configuration a dozen times, about 30 ms each). A key's loading lock
    lives only while its load is under way. `forget` is the only invalidation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[K, tuple[int, T]] = {}
        self._loading: dict[K, threading.Lock] = {}

    def get(self, key: K, generation: int, load: Callable[[], T]) -> T:
        with self._lock:
            cached = self._values.get(key)
            if cached and cached[0] == generation:
                return cached[1]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                cached = self._values.get(key)
            if cached and cached[0] == generation:
                return cached[1]
            try:
                value = load()
                with self._lock:
                    newest = self._values.get(key)
                    if newest is None or newest[0] <= generation:  # never back to an older one
                        self._values[key] = (generation, value)
            finally:
                with self._lock:
                    if self._loading.get(key) is loading:
                        del self._loading[key]
            return value

    def forget(self) -> None:
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        return len(self._values)

    @property
    def loading(self) -> int:
        """Loads under way (their locks)."""
        return len(self._loading)


_configs: GenerationCache[int, RuntimeConfig] = GenerationCache()
_forced: GenerationCache[
    tuple[tuple[int, ...], tuple[int, ...]], tuple[list[Source], list[Source]]
] = GenerationCache()
_carried: GenerationCache[tuple[tuple[Any, Any, Any], ...], list[Source]] = GenerationCache()


def forget_caches() -> None:
    """The one invalidation of this process's catalog caches: every configuration and
    source set above, and the pinned MCP tools of the global registry they were built
    with (the test suite: a rolled-back transaction takes the generation back and a
    sequence reset reuses ids, so (id, generation) can repeat)."""
    for cache in (_configs, _forced, _carried):
        cache.forget()
    forget_pinned()


def runtime_config(configuration_id: int, generation: int) -> RuntimeConfig:
    """The configuration at `generation`; loading it (only then) brings the registry's
    pinned tools up to that generation (`build_runtime_config`)."""

    def load() -> RuntimeConfig:
        configuration = Configuration.objects.select_related("provider").get(pk=configuration_id)
        return build_runtime_config(configuration, generation)

    return _configs.get(configuration_id, generation, load)


def forced_sources(
    snippet_ids: Iterable[int] | None, skill_ids: Iterable[int] | None, generation: int
) -> tuple[list[Source], list[Source]]:
    """RG-1/RG-2: the run's forced set by identity, re-read whenever the catalog changed."""
    key = (tuple(snippet_ids or ()), tuple(skill_ids or ()))
    if not key[0] and not key[1]:
        return [], []
    return _forced.get(key, generation, lambda: forced_for_resume(key[0], key[1]))


def carried_sources(carried: Sequence[dict[str, Any]], generation: int) -> list[Source]:
    """FORK-1: the sources a fork carried, by identity, re-read whenever the catalog
    changed (as `forced_sources`)."""
    if not carried:
        return []
    key = tuple((c.get("kind"), c.get("id"), c.get("from")) for c in carried)
    return _carried.get(key, generation, lambda: carried_for_send(carried))
