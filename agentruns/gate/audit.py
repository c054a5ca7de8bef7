"""Asserting a decision: one audit row, then raise (enforce) or log (observe) — CG-4..CG-6.

The gate writes nothing itself: the caller hands it `save`, which writes the rows durably
and returns the live catalog generation. The loop's `save` writes them in the same
statement as the step before the send (`RunContext.audit`), behind the lease's fence."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from agentruns.classes import Enforcement, Zone, parse_enforcement
from agentruns.errors import ContextRefused
from agentruns.frozen import quick
from agentruns.gate.core import (
    ConfigView,
    Decision,
    ResultSource,
    Source,
    Verdict,
    decide,
    refusal_fields,
    refusal_message,
)

logger = logging.getLogger(__name__)


@cache
def current_enforcement() -> Enforcement:
    """Read once (the loop asks before every view of its log), again when it changes."""
    return parse_enforcement(getattr(settings, "AGENTRUNS_DATA_CLASS_ENFORCEMENT", None))


@receiver(setting_changed)
def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting == "AGENTRUNS_DATA_CLASS_ENFORCEMENT":
        current_enforcement.cache_clear()


@quick
@dataclass(frozen=True, slots=True)
class Asserted:
    decision: Decision
    enforcement: Enforcement
    # The catalog generation read in the same statement as the audit row: a caller that
    # decided on a cached configuration learns whether it was still the live one (CG-9).
    generation: int

    @property
    def observed_refusal(self) -> bool:
        return self.decision.refused and self.enforcement is Enforcement.OBSERVE


# One GateAudit row as its column values (`created_at` is the writer's): the loop writes
# them with a step, in its statement, and never needs a model instance of them.
AuditRow = dict[str, Any]


def audit_row(decision: Decision, enforcement: Enforcement, run_id: int | None) -> AuditRow:
    source = decision.source
    return dict(
        verdict=decision.verdict.value,
        enforcement=enforcement.recorded,
        configuration=decision.configuration,
        run_id=run_id,
        zone=decision.zone.label if decision.zone else "",
        ceiling=decision.ceiling.label if decision.ceiling else "",
        source_kind=source.kind if source else "",
        source_name=source.name if source else "",
        data_class=decision.data_class.label if decision.data_class else "",
        forced=bool(source and source.forced),
    )


# Writes audit rows durably (each is a send's justification: never without the WAL
# flush) and returns the live catalog generation; a fenced worker's raises Fenced (CLU-2).
SaveAudits = Callable[[list[AuditRow]], int]


def context_assert(
    *,
    config: ConfigView,
    sources: Sequence[Source],
    save: SaveAudits,
    run_id: int | None = None,
) -> Asserted:
    decision = decide(config, sources)
    enforcement = current_enforcement()
    generation = save([audit_row(decision, enforcement, run_id)])
    if decision.refused:
        if enforcement is Enforcement.ENFORCE:
            refused = ContextRefused(refusal_message(decision), **refusal_fields(decision))
            refused.generation = generation
            raise refused
        logger.warning("context refusal observed: %s", refusal_message(decision))
    return Asserted(decision, enforcement, generation)


def withheld_assert(
    *,
    config: ConfigView,
    results: Sequence[ResultSource],
    zone: Zone,
    save: SaveAudits,
    run_id: int | None = None,
) -> None:
    """MCP-4: one `gate.refused` audit row per result a send carries withheld (observed,
    and sent after all, when the gate only observes: CG-6). Names and classes only."""
    enforcement = current_enforcement()
    save([_withheld_row(config, result, zone, enforcement, run_id) for result in results])
    if enforcement is Enforcement.OBSERVE:
        for result in results:
            logger.warning("withheld result observed: %s of %s", result.kind, result.tool)


def _withheld_row(
    config: ConfigView,
    result: ResultSource,
    zone: Zone,
    enforcement: Enforcement,
    run_id: int | None,
) -> AuditRow:
    assert result.data_class is not None
    return dict(
        verdict=Verdict.REFUSED.value,
        enforcement=enforcement.recorded,
        configuration=config.slug,
        run_id=run_id,
        zone=zone.label,
        ceiling=zone.ceiling.label,
        source_kind=result.kind,
        source_name=result.tool,
        data_class=result.data_class.label,
        forced=False,
    )
