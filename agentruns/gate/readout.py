"""CG-10: the readout folds the very list the gate folds; admin, playground and API use it."""

from __future__ import annotations

from collections.abc import Sequence

from agentruns.classes import Enforcement
from agentruns.gate.core import (
    ConfigView,
    Source,
    Verdict,
    decide,
    reachable_zone,
    refusal_message,
)

UNDECLARED = "undeclared"


def _source_row(source: Source) -> dict:
    declared = source.data_class
    return {
        "kind": source.kind,
        "id": source.id,
        "name": source.name,
        "title": source.title,
        "data_class": declared.label if declared else UNDECLARED,
        "forced": source.forced,
        **source.carried,
    }


def verdict_label(verdict: Verdict, mode: Enforcement) -> str:
    """CG-6: a refusal under observe reads "refused (observed)"."""
    if verdict is Verdict.REFUSED and mode is Enforcement.OBSERVE:
        return "refused (observed)"
    return verdict.value


def readout(config: ConfigView, sources: Sequence[Source], mode: Enforcement) -> dict:
    decision = decide(config, sources)
    zone = reachable_zone(config)
    effective = decision.source
    return {
        "configuration": config.slug,
        "sources": [_source_row(source) for source in sources],
        "effective_class": effective.data_class.label
        if effective and effective.data_class
        else UNDECLARED,
        "effective_source": (
            {
                "kind": effective.kind,
                "name": effective.name,
                "forced": effective.forced,
                **effective.carried,
            }
            if effective
            else None
        ),
        "zone": zone.label,
        "ceiling": zone.ceiling.label,
        "chain": [{"configuration": link.slug, "zone": link.zone.label} for link in config.chain],
        "enforcement": mode.value,
        "verdict": verdict_label(decision.verdict, mode),
        "message": refusal_message(decision) if decision.refused else "",
    }
