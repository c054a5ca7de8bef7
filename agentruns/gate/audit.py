"""Asserting a decision: one audit row, then raise (enforce) or log (observe) — CG-4..CG-6."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
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
from agentruns.models import GateAudit
from agentruns.runtime.dbconn import fast_commit

logger = logging.getLogger(__name__)


def current_enforcement() -> Enforcement:
    return parse_enforcement(getattr(settings, "AGENTRUNS_DATA_CLASS_ENFORCEMENT", None))


@dataclass(frozen=True)
class Asserted:
    decision: Decision
    mode: Enforcement

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


def save_audit(row: GateAudit, *, durable: bool) -> None:
    """A permitted decision's row may commit without waiting for the WAL flush (see
    agentruns/runtime/journal.py); a refusal, observed or enforced, always waits."""
    if not fast_commit(durable):
        row.save()
        return
    row.created_at = timezone.now()
    fields = [f for f in GateAudit._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(f.column for f in fields)
    values = [f.get_db_prep_save(getattr(row, f.attname), connection) for f in fields]
    placeholders = ", ".join(["%s"] * len(fields))
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH a AS (INSERT INTO {GateAudit._meta.db_table} ({columns}) "
            f"VALUES ({placeholders}) RETURNING 1) "
            "SELECT set_config('synchronous_commit', 'off', true) FROM a",
            values,
        )


def context_assert(
    *,
    config: ConfigView,
    sources: Sequence[Source],
    run_id: int | None = None,
    durable: bool = True,
) -> Asserted:
    decision = decide(config, sources)
    mode = current_enforcement()
    save_audit(audit_row(decision, mode, run_id), durable=durable or decision.refused)
    if decision.refused:
        if mode is Enforcement.ENFORCE:
            raise ContextRefused(refusal_message(decision), **refusal_fields(decision))
        logger.warning("context refusal observed: %s", refusal_message(decision))
    return Asserted(decision, mode)
