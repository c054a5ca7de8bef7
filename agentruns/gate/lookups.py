"""Database → plain gate values. Composition sees only active sources (FS-4); a resume
sees every source that still exists (RG-2)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agentruns.gate.core import SKILL, SNIPPET, SYSTEM_PROMPT, ConfigView, Hop, Source
from agentruns.models import (
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    Skill,
    Snippet,
)

DEACTIVATED = "deactivated"
GONE = "gone"


@dataclass(frozen=True)
class Dropped:
    """FS-4: a forced source composition left out, and why."""

    kind: str
    id: int
    name: str
    reason: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "id": self.id, "name": self.name, "reason": self.reason}


def snippet_source(snippet: Snippet, *, forced: bool = False) -> Source:
    return Source(
        kind=SNIPPET,
        id=snippet.pk,
        name=snippet.slug,
        title=snippet.name,
        declared=snippet.data_class,
        text=snippet.text,
        forced=forced,
        version=snippet.version,
    )


def skill_source(skill: Skill, *, forced: bool = False) -> Source:
    return Source(
        kind=SKILL,
        id=skill.pk,
        name=skill.slug,
        title=skill.name,
        declared=skill.data_class,
        text=skill.instructions,
        forced=forced,
        version=skill.version,
    )


def hop_for(configuration: Configuration) -> Hop:
    provider = configuration.provider
    return Hop(
        slug=configuration.slug,
        provider_zone=provider.trust_zone if provider else None,
        version=configuration.version,
        provider_version=provider.version if provider else 0,
    )


def config_view(
    configuration: Configuration, *, hop: Callable[[Configuration], Hop] = hop_for
) -> ConfigView:
    """The configuration as the gate, the readout and the runtime see it, in 3 queries.
    The runtime passes the providers' `link_for`, so its chain also says how to reach
    each provider; the gate only ever reads a hop's slug and zone."""
    return config_views([configuration], hop=hop)[configuration.pk]


def config_views(
    configurations: Iterable[Configuration], *, hop: Callable[[Configuration], Hop] = hop_for
) -> dict[int, ConfigView]:
    """`config_view` of each configuration (by id), in 3 queries however many there are."""
    by_id = {configuration.pk: configuration for configuration in configurations}
    snippets: dict[int, list[Source]] = {pk: [] for pk in by_id}
    skills: dict[int, list[Source]] = {pk: [] for pk in by_id}
    fallbacks: dict[int, list[Hop]] = {pk: [] for pk in by_id}
    ids = list(by_id)
    for snippet in ConfigurationSnippet.objects.filter(
        configuration__in=ids, snippet__active=True
    ).select_related("snippet"):
        snippets[snippet.configuration_id].append(snippet_source(snippet.snippet))
    for skill in ConfigurationSkill.objects.filter(
        configuration__in=ids, skill__active=True
    ).select_related("skill"):
        skills[skill.configuration_id].append(skill_source(skill.skill))
    for fallback in ConfigurationFallback.objects.filter(configuration__in=ids).select_related(
        "fallback__provider"
    ):
        fallbacks[fallback.configuration_id].append(hop(fallback.fallback))
    return {
        pk: ConfigView(
            id=pk,
            slug=configuration.slug,
            name=configuration.name,
            primary=hop(configuration),
            fallbacks=tuple(fallbacks[pk]),
            system_prompt=configuration.system_prompt,
            system_prompt_class=configuration.system_prompt_data_class,
            snippets=tuple(snippets[pk]),
            skills=tuple(skills[pk]),
        )
        for pk, configuration in by_id.items()
    }


def _ordered(ids: Iterable[int] | None) -> list[int]:
    seen: dict[int, None] = {}
    for raw in ids or ():
        seen.setdefault(int(raw), None)
    return list(seen)


def forced_for_composition(
    snippet_ids: Iterable[int] | None, skill_ids: Iterable[int] | None
) -> tuple[list[Source], list[Source], list[Dropped]]:
    """FS-4: only active sources are injected; the rest are reported with a reason."""
    dropped: list[Dropped] = []
    snippets, skills = _ordered(snippet_ids), _ordered(skill_ids)
    rows = source_rows(forced_identities(snippets, skills))
    return (
        _load(rows, snippets, SNIPPET, dropped, active_only=True),
        _load(rows, skills, SKILL, dropped, active_only=True),
        dropped,
    )


def forced_for_resume(
    snippet_ids: Iterable[int] | None,
    skill_ids: Iterable[int] | None,
    rows: SourceRows | None = None,
) -> tuple[list[Source], list[Source]]:
    """RG-2: existence, not activity. A deleted source contributes nothing. `rows`: read
    already for many runs together (`source_rows`), else read here."""
    ignored: list[Dropped] = []
    snippets, skills = _ordered(snippet_ids), _ordered(skill_ids)
    if rows is None:
        rows = source_rows(forced_identities(snippets, skills))
    return (
        _load(rows, snippets, SNIPPET, ignored, active_only=False),
        _load(rows, skills, SKILL, ignored, active_only=False),
    )


# Each source's row by (kind, id): a snippet, a skill, or for a system prompt its
# configuration.
SourceRows = Mapping[tuple[str, int], Snippet | Skill | Configuration]
_MODELS: tuple[tuple[str, type[Snippet] | type[Skill] | type[Configuration]], ...] = (
    (SNIPPET, Snippet),
    (SKILL, Skill),
    (SYSTEM_PROMPT, Configuration),
)


def source_rows(identities: Iterable[tuple[str, int]]) -> SourceRows:
    """The rows of these sources, in one query per kind named however many runs' sets
    they come from (GOV-4 reads what all of a replay's originals carry at once)."""
    ids: dict[str, set[int]] = {}
    for kind, pk in identities:
        ids.setdefault(kind, set()).add(pk)
    rows: dict[tuple[str, int], Snippet | Skill | Configuration] = {}
    for kind, model in _MODELS:
        if ids.get(kind):
            rows.update({(kind, row.pk): row for row in model.objects.filter(pk__in=ids[kind])})
    return rows


def forced_identities(
    snippet_ids: Iterable[int] | None, skill_ids: Iterable[int] | None
) -> list[tuple[str, int]]:
    return [
        *((SNIPPET, pk) for pk in _ordered(snippet_ids)),
        *((SKILL, pk) for pk in _ordered(skill_ids)),
    ]


def carried_identities(carried: Iterable[dict]) -> list[tuple[str, int, int]]:
    """FORK-1: (kind, id, from) of each source a fork carried ({kind, id, from})."""
    return [(str(c.get("kind")), int(c.get("id", 0)), int(c.get("from", 0))) for c in carried]


def _load(
    rows: SourceRows, ids: list[int], kind: str, dropped: list[Dropped], *, active_only: bool
) -> list[Source]:
    sources: list[Source] = []
    for pk in ids:
        row = rows.get((kind, pk))
        if row is None or isinstance(row, Configuration):
            dropped.append(Dropped(kind, pk, "", GONE))
        elif active_only and not row.active:
            dropped.append(Dropped(kind, pk, row.slug, DEACTIVATED))
        elif isinstance(row, Snippet):
            sources.append(snippet_source(row, forced=True))
        else:
            sources.append(skill_source(row, forced=True))
    return sources


def carried_for_send(carried: Iterable[dict], rows: SourceRows | None = None) -> list[Source]:
    """FORK-1: the sources a fork carried from its original, by identity ({kind, id,
    from}) and live like a resumed run's (RG-1, RG-2): a class changed since counts, a
    deleted source contributes nothing. No text: a carried source binds by its class.
    `rows`: read already for many runs together (`source_rows`), else read here."""
    wanted = carried_identities(carried)
    if rows is None:
        rows = source_rows((kind, pk) for kind, pk, _ in wanted)
    found = []
    for kind, pk, origin in wanted:
        row = rows.get((kind, pk))
        if row is None:
            continue
        declared = (
            row.system_prompt_data_class if isinstance(row, Configuration) else row.data_class
        )
        found.append(Source(kind, pk, row.slug, declared, title=row.name, carried_from=origin))
    return found
