"""Asserting a decision: one audit row, then raise (enforce) or log (observe) — CG-4..CG-6."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from agentruns.errors import ContextRefused
from agentruns.gate.core import (
    ConfigView,
    Decision,
    Enforcement,
    Source,
    decide,
    parse_enforcement,
    refusal_fields,
    refusal_message,
)
from agentruns.models import CatalogGeneration, GateAudit
from agentruns.runtime.dbconn import fast_commit, prepared, this_connection

logger = logging.getLogger(__name__)


def current_enforcement() -> Enforcement:
    return parse_enforcement(getattr(settings, "AGENTRUNS_DATA_CLASS_ENFORCEMENT", None))


@dataclass(frozen=True)
class Asserted:
    decision: Decision
    mode: Enforcement
    # The catalog generation read in the same statement as the audit row: a caller that
    # decided on a cached configuration learns whether it was still the live one (CG-9).
    generation: int

    @property
    def observed_refusal(self) -> bool:
        return self.decision.refused and self.mode is Enforcement.OBSERVE


def audit_row(decision: Decision, mode: Enforcement, run_id: int | None) -> GateAudit:
    source = decision.source
    return GateAudit(
        verdict=decision.verdict.value,
        mode=GateAudit.Mode.OBSERVED if mode is Enforcement.OBSERVE else GateAudit.Mode.ENFORCED,
        configuration=decision.configuration,
        run_id=run_id,
        zone=decision.zone.label if decision.zone else "",
        ceiling=decision.ceiling.label if decision.ceiling else "",
        source_kind=source.kind if source else "",
        source_name=source.name if source else "",
        data_class=decision.data_class.label if decision.data_class else "",
        forced=bool(source and source.forced),
    )


AUDIT_FIELDS = [f for f in GateAudit._meta.concrete_fields if not f.primary_key]
AUDIT_SQL = {
    fast: (
        f"WITH a AS (INSERT INTO {GateAudit._meta.db_table} "
        f"({', '.join(str(f.column) for f in AUDIT_FIELDS)}) "
        f"VALUES ({', '.join(['%s'] * len(AUDIT_FIELDS))}) RETURNING 1) "
        f"SELECT (SELECT value FROM {CatalogGeneration._meta.db_table} WHERE id = 1)"
        + (", set_config('synchronous_commit', 'off', true)" if fast else "")
        + " FROM a"
    )
    for fast in (False, True)
}


def save_audit(row: GateAudit, *, durable: bool) -> int:
    """Write the row; return the live catalog generation. On PostgreSQL that is one
    statement, and a permitted decision's row need not wait for the WAL flush."""
    if this_connection().vendor != "postgresql":
        row.save()
        return CatalogGeneration.objects.values_list("value", flat=True).get(pk=1)
    row.created_at = timezone.now()
    values = [getattr(row, f.attname) for f in AUDIT_FIELDS]  # plain str/bool/int/datetime
    fast = fast_commit(durable)
    return int(prepared(AUDIT_SQL[fast], values)[0])


def context_assert(
    *, config: ConfigView, sources: Sequence[Source], run_id: int | None = None
) -> Asserted:
    decision = decide(config, sources)
    mode = current_enforcement()
    generation = save_audit(audit_row(decision, mode, run_id), durable=decision.refused)
    if decision.refused:
        if mode is Enforcement.ENFORCE:
            refused = ContextRefused(refusal_message(decision), **refusal_fields(decision))
            refused.generation = generation
            raise refused
        logger.warning("context refusal observed: %s", refusal_message(decision))
    return Asserted(decision, mode, generation)
