"""Read-side queries shared by the admin, the pages and the API."""

from __future__ import annotations

from collections.abc import Iterable

from agentruns.gate.audit import current_enforcement
from agentruns.gate.core import compose_sources
from agentruns.gate.lookups import config_view, forced_for_composition
from agentruns.gate.readout import readout
from agentruns.models import Configuration


def configuration_readout(
    *,
    configuration: Configuration,
    forced_snippet_ids: Iterable[int] | None = None,
    forced_skill_ids: Iterable[int] | None = None,
) -> dict:
    """CG-10 for a configuration, optionally with a forced set composed as a run would."""
    view = config_view(configuration)
    snippets, skills, dropped = forced_for_composition(forced_snippet_ids, forced_skill_ids)
    data = readout(view, compose_sources(view, snippets, skills), current_enforcement())
    data["dropped"] = [item.as_dict() for item in dropped]
    return data
