"""CG-10: the readout folds the very list the gate folds; admin, playground and API use it."""

from __future__ import annotations

from collections.abc import Sequence

from agentruns.classes import DataClass, Enforcement
from agentruns.gate.core import (
    ConfigView,
    ResultSource,
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


# A granted tool as the readout shows it: (name, output class, effect, what a call waits
# for: "approval", "an answer" or "").
GrantedTool = tuple[str, DataClass, str, str]


def readout(
    config: ConfigView,
    sources: Sequence[Source],
    mode: Enforcement,
    *,
    tools: Sequence[GrantedTool] = (),
    withheld: Sequence[ResultSource] = (),
) -> dict:
    """CG-10, and MCP-4's part: the tools the configuration grants with their classes
    (a call to one over the ceiling is refused, TOOL-2), and for a run the results its
    next send would carry withheld."""
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
        "tools": [
            {
                "name": name,
                "data_class": data_class.label,
                "effect": effect,
                "waits_for": waits_for,
                "over_ceiling": data_class > zone.ceiling,
            }
            for name, data_class, effect, waits_for in tools
        ],
        "withheld": [
            {
                "sequence": result.sequence,
                "kind": result.kind,
                "tool": result.tool,
                "data_class": result.data_class.label if result.data_class else UNDECLARED,
            }
            for result in withheld
        ],
    }
