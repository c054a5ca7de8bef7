"""Plain gate values for pure tests (no database): sources, links, configuration views."""

from __future__ import annotations

from collections.abc import Sequence

from agentruns.gate.core import SKILL, SNIPPET, ConfigView, Source
from agentruns.providers.base import Link

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
