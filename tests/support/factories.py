"""Tiny test helpers: plain functions that build catalog rows and pure gate values.

Database helpers (`make_*`) need a test marked `django_db`; `view`, `link` and `source`
build plain values for pure tests and never touch the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentruns.gate.core import SKILL, SNIPPET, ConfigView, Source
from agentruns.models import Configuration, Provider, Skill, Snippet
from agentruns.providers.base import Link
from agentruns.services.catalog import configuration_set_sources
from tests.support.fake_provider import FakeProvider

_UNSET = object()


# --- database rows ----------------------------------------------------------------------


def make_provider(slug: str, zone: str = "external_global", kind: str = "scripted", **kw):
    kw.setdefault("name", slug.replace("-", " ").title())
    return Provider.objects.create(slug=slug, kind=kind, trust_zone=zone, **kw)


def make_snippet(slug: str, data_class: str = "", active: bool = True, text: str | None = None):
    return Snippet.objects.create(
        slug=slug,
        name=f"Snippet {slug}",
        data_class=data_class,
        active=active,
        text=f"text of snippet {slug}" if text is None else text,
    )


def make_skill(
    slug: str, data_class: str = "", active: bool = True, instructions: str | None = None
):
    return Skill.objects.create(
        slug=slug,
        name=f"Skill {slug}",
        data_class=data_class,
        active=active,
        instructions=f"instructions of skill {slug}" if instructions is None else instructions,
    )


def make_configuration(
    slug: str,
    provider: Provider | object | None = _UNSET,
    snippets: Sequence[Snippet] = (),
    skills: Sequence[Skill] = (),
    fallbacks: Sequence[Configuration] = (),
    system_prompt: str = "",
    system_prompt_data_class: str = "",
    **kw,
) -> Configuration:
    """A configuration with ordered sources. Without `provider`, a fresh local-zone
    scripted provider is created; pass `provider=None` for a configuration without one."""
    if provider is _UNSET:
        provider = make_provider(f"{slug}-provider", zone="local")
    kw.setdefault("name", slug.replace("-", " ").title())
    configuration = Configuration.objects.create(
        slug=slug,
        provider=provider,  # type: ignore[misc]
        system_prompt=system_prompt,
        system_prompt_data_class=system_prompt_data_class,
        **kw,
    )
    configuration_set_sources(
        configuration=configuration,
        snippet_ids=[s.pk for s in snippets],
        skill_ids=[s.pk for s in skills],
        fallback_ids=[c.pk for c in fallbacks],
    )
    return configuration


def make_openai_configuration(
    slug: str, fake: FakeProvider, *, zone: str = "local", provider_kw: Any = None, **kw: Any
) -> Configuration:
    """A configuration whose provider is the fake server's Chat Completions endpoint."""
    kw.setdefault("model", "gpt-test")
    return _fake_configuration(slug, "openai", fake.openai_base_url, zone, provider_kw, kw)


def make_anthropic_configuration(
    slug: str, fake: FakeProvider, *, zone: str = "local", provider_kw: Any = None, **kw: Any
) -> Configuration:
    """A configuration whose provider is the fake server's Messages endpoint."""
    kw.setdefault("model", "claude-test")
    return _fake_configuration(slug, "anthropic", fake.anthropic_base_url, zone, provider_kw, kw)


def _fake_configuration(
    slug: str, kind: str, base_url: str, zone: str, provider_kw: Any, kw: dict[str, Any]
) -> Configuration:
    fields = {"base_url": base_url, "max_retries": 0, "timeout_seconds": 10}
    provider = make_provider(
        f"{slug}-{kind}", zone=zone, kind=kind, **{**fields, **(provider_kw or {})}
    )
    return make_configuration(slug, provider=provider, **kw)


# --- pure gate values -------------------------------------------------------------------

_next_id = iter(range(1000, 10**9))


def source(
    name: str,
    declared: str = "",
    kind: str = SNIPPET,
    *,
    forced: bool = False,
    id: int | None = None,
    text: str | None = None,
) -> Source:
    """A snippet (or `kind=SKILL`) source with a distinctive text."""
    return Source(
        kind=kind,
        id=next(_next_id) if id is None else id,
        name=name,
        declared=declared,
        text=f"TEXT-OF-{name.upper()}" if text is None else text,
        forced=forced,
    )


def skill(name: str, declared: str = "", **kw) -> Source:
    return source(name, declared, SKILL, **kw)


def link(slug: str, zone: str | None = "local", **kw) -> Link:
    """`zone=None` is a configuration without a provider."""
    return Link(
        slug=slug,
        provider_slug=None if zone is None else f"{slug}-provider",
        provider_zone=zone,
        **kw,
    )


def view(
    slug: str = "cfg",
    zone: str | None = "local",
    *,
    fallbacks: Sequence[Link] = (),
    system_prompt: str = "",
    system_prompt_class: str = "",
    snippets: Sequence[Source] = (),
    skills: Sequence[Source] = (),
    id: int = 1,
) -> ConfigView:
    return ConfigView(
        id=id,
        slug=slug,
        name=slug.title(),
        primary=link(slug, zone),
        fallbacks=tuple(fallbacks),
        system_prompt=system_prompt,
        system_prompt_class=system_prompt_class,
        snippets=tuple(snippets),
        skills=tuple(skills),
    )
