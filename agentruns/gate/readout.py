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
        **_origin(source),
    }


def _origin(source: Source) -> dict:
    """CG-12: a reply's row names what set its class."""
    if source.origin is None:
        return {}
    return {"origin": {"kind": source.origin[0], "name": source.origin[1]}}


def verdict_label(verdict: Verdict, mode: Enforcement) -> str:
    """CG-6: a refusal under observe reads "refused (observed)"."""
    if verdict is Verdict.REFUSED and mode is Enforcement.OBSERVE:
        return "refused (observed)"
    return verdict.value


def _carried_results(
    results: Sequence[ResultSource], withheld: Sequence[ResultSource]
) -> list[ResultSource]:
    held = {result.sequence for result in withheld}
    return [r for r in results if r.sequence not in held]


def _effective(source: Source | None, carried: Sequence[ResultSource]) -> dict:
    """The strictest class the next send carries: a source's, or a carried tool result's
    when that is stricter (MCP-4: the result travels with its tool's class)."""
    declared = source.data_class if source else None
    strictest = max((r for r in carried if r.data_class), key=_class_of, default=None)
    if strictest and (declared is None or _class_of(strictest) > declared):
        return {
            "effective_class": _class_of(strictest).label,
            "effective_source": {"kind": "tool result", "name": strictest.tool, "forced": False},
        }
    return {
        "effective_class": declared.label if declared else UNDECLARED,
        "effective_source": (
            {
                "kind": source.kind,
                "name": source.name,
                "forced": source.forced,
                **source.carried,
                **_origin(source),
            }
            if source
            else None
        ),
    }


def _class_of(result: ResultSource) -> DataClass:
    assert result.data_class is not None
    return result.data_class


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
    results: Sequence[ResultSource] = (),
) -> dict:
    """CG-10, and MCP-4's part: the tools the configuration grants with their classes
    (a call to one over the ceiling is refused, TOOL-2), and for a run the results its
    next send would carry withheld. `results`: every result of the run's context; those
    not withheld are carried, and the strictest of them can set the effective class."""
    decision = decide(config, sources)
    zone = reachable_zone(config)
    carried = _carried_results(results, withheld)
    verdict = decision.verdict
    if verdict is Verdict.UNDECLARED and any(r.data_class for r in carried):
        verdict = Verdict.PERMITTED  # a carried result is classed, and within the ceiling
    return {
        "configuration": config.slug,
        "sources": [_source_row(source) for source in sources],
        "source_classes": sorted({row["data_class"] for row in map(_source_row, sources)}),
        **_effective(decision.source, carried),
        "zone": zone.label,
        "ceiling": zone.ceiling.label,
        "chain": [{"configuration": link.slug, "zone": link.zone.label} for link in config.chain],
        "enforcement": mode.value,
        "verdict": verdict_label(verdict, mode),
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
