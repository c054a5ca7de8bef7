"""Catalog writes that span rows: a configuration's ordered sources and fallbacks."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from agentruns.errors import InvalidRequest
from agentruns.models import (
    CatalogGeneration,
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
)


def fallback_problem(*, configuration_id: int | None, fallback_ids: Sequence[int]) -> str | None:
    """A configuration may not fall back to itself, nor close a cycle through others."""
    if configuration_id is not None and configuration_id in fallback_ids:
        return "A configuration cannot be its own fallback."
    if len(set(fallback_ids)) != len(fallback_ids):
        return "A fallback is listed twice."
    if configuration_id is None:
        return None
    edges: dict[int, list[int]] = {}
    for src, dst in ConfigurationFallback.objects.exclude(
        configuration_id=configuration_id
    ).values_list("configuration_id", "fallback_id"):
        edges.setdefault(src, []).append(dst)
    edges[configuration_id] = list(fallback_ids)
    path = _cycle_from(configuration_id, edges)
    if path:
        slugs = dict(Configuration.objects.filter(pk__in=path).values_list("pk", "slug"))
        return "Fallbacks would form a cycle: " + " → ".join(slugs[pk] for pk in path) + "."
    return None


def _cycle_from(start: int, edges: dict[int, list[int]]) -> list[int]:
    stack: list[tuple[int, list[int]]] = [(start, [start])]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        for nxt in edges.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return []


@transaction.atomic
def configuration_set_sources(
    *,
    configuration: Configuration,
    snippet_ids: Sequence[int] | None = None,
    skill_ids: Sequence[int] | None = None,
    fallback_ids: Sequence[int] | None = None,
) -> None:
    """Replace the ordered lists that are given; leave the others untouched."""
    if fallback_ids is not None:
        problem = fallback_problem(
            configuration_id=configuration.pk, fallback_ids=list(fallback_ids)
        )
        if problem:
            raise InvalidRequest(problem, fields={"fallbacks": [problem]})
        ConfigurationFallback.objects.filter(configuration=configuration).delete()
        ConfigurationFallback.objects.bulk_create(
            ConfigurationFallback(configuration=configuration, fallback_id=pk, position=i)
            for i, pk in enumerate(fallback_ids)
        )
    if snippet_ids is not None:
        ConfigurationSnippet.objects.filter(configuration=configuration).delete()
        ConfigurationSnippet.objects.bulk_create(
            ConfigurationSnippet(configuration=configuration, snippet_id=pk, position=i)
            for i, pk in enumerate(dict.fromkeys(snippet_ids))
        )
    if skill_ids is not None:
        ConfigurationSkill.objects.filter(configuration=configuration).delete()
        ConfigurationSkill.objects.bulk_create(
            ConfigurationSkill(configuration=configuration, skill_id=pk, position=i)
            for i, pk in enumerate(dict.fromkeys(skill_ids))
        )
    # bulk_create sends no signals; the runtime must still see the change (CG-9).
    CatalogGeneration.bump()
