"""CG-9, PERF-6, MCP-2: the process's catalog caches are explicit — one cache type keyed
by the catalog generation, one invalidation (`forget_caches`) that drops the pinned MCP
tools of the global registry with the configurations built on them — and a loading lock
lives only while its load runs (it used to stay for every key ever loaded)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from agentruns.runtime import config
from agentruns.runtime.config import GenerationCache, forget_caches
from agentruns.tools.registry import REGISTRY


def test_cg9_a_value_is_loaded_once_per_generation_and_again_at_a_newer_one():
    cache: GenerationCache[str, int] = GenerationCache()
    loads: list[int] = []

    def load(value: int) -> int:
        loads.append(value)
        return value

    assert cache.get("k", 1, lambda: load(10)) == 10
    assert cache.get("k", 1, lambda: load(11)) == 10
    assert cache.get("k", 2, lambda: load(20)) == 20
    assert loads == [10, 20]
    assert cache.loading == 0  # no lock left behind for a key loaded


def test_perf6_threads_missing_one_key_together_share_the_first_ones_load():
    cache: GenerationCache[str, int] = GenerationCache()
    started, release = threading.Event(), threading.Event()
    loads: list[int] = []

    def slow() -> int:
        loads.append(1)
        started.set()
        release.wait(5)
        return 7

    first = threading.Thread(target=lambda: cache.get("k", 3, slow))
    first.start()
    started.wait(5)
    assert cache.loading == 1
    got: list[int] = []
    second = threading.Thread(target=lambda: got.append(cache.get("k", 3, slow)))
    second.start()
    release.set()
    first.join(5)
    second.join(5)
    assert got == [7] and loads == [1]
    assert cache.loading == 0


def test_cg9_a_late_load_of_an_older_generation_never_replaces_a_newer_value():
    cache: GenerationCache[str, str] = GenerationCache()
    cache.get("k", 5, lambda: "new")
    assert cache.get("k", 4, lambda: "old") == "old"  # the caller at 4 gets its own
    assert cache.get("k", 5, lambda: "reloaded") == "new"


def test_a_failed_load_leaves_no_lock_and_no_value():
    cache: GenerationCache[str, int] = GenerationCache()

    def broken() -> int:
        raise RuntimeError("no database")

    with pytest.raises(RuntimeError):
        cache.get("k", 1, broken)
    assert cache.loading == 0 and len(cache) == 0


def test_mcp2_forget_caches_is_the_one_invalidation_of_configurations_and_pinned_tools():
    pinned = replace(REGISTRY.in_code()[0], name="srv.pinned_probe", group="srv")
    REGISTRY.replace_pinned([pinned])
    config._configs.get(1, 1, lambda: object())
    config._carried.get((("snippet", 1, 2),), 1, list)
    assert REGISTRY.get("srv.pinned_probe") is pinned and len(config._configs) == 1
    forget_caches()
    assert REGISTRY.get("srv.pinned_probe") is None
    assert len(config._configs) == len(config._forced) == len(config._carried) == 0
