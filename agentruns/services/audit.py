"""The audit export (OPS-5): gate decisions, approvals, denials, expiries, redactions and
cancels as one time-ordered stream of flat records, for the API and the admin alike.

Records carry names, decisions and reasons, never a source's text or a secret: gate rows
hold source names and classes only (CG-4), and what people typed was redacted before it
was stored (CG-11). The two sources are read in time order, a chunk at a time, and merged,
so a year of audit streams in constant memory and its first line comes at once (PERF-8).
"""

from __future__ import annotations

import csv
import heapq
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, Q, QuerySet
from django.http import StreamingHttpResponse
from django.utils import timezone

from agentruns import events as ev
from agentruns.egress import EGRESS_WITHHELD_VERDICT
from agentruns.models import Event, GateAudit

GATE_PREFIX = "gate."
EGRESS_WITHHELD = "egress.withheld"  # CG-14
EVENT_KINDS = ev.AUDITED
COLUMNS = ("time", "kind", "run", "configuration", "actor", "decision", "reason")
# Small enough that the first lines go out at once, large enough that a year's export is
# few statements (PERF-8).
CHUNK = 500
GATE_FIELDS = (
    "id",
    "created_at",
    "verdict",
    "enforcement",
    "configuration",
    "run_id",
    "zone",
    "ceiling",
    "source_kind",
    "source_name",
    "data_class",
    "forced",
)


@dataclass(frozen=True)
class AuditFilter:
    start: datetime | None = None
    end: datetime | None = None
    configuration: str | None = None
    kinds: Sequence[str] = ()

    def wants(self, kind: str) -> bool:
        return not self.kinds or kind in self.kinds

    def wants_gate(self) -> bool:
        return not self.kinds or any(
            k.startswith(GATE_PREFIX) or k == EGRESS_WITHHELD for k in self.kinds
        )


def _window(field: str, flt: AuditFilter) -> Q:
    q = Q()
    if flt.start:
        q &= Q(**{f"{field}__gte": flt.start})
    if flt.end:
        q &= Q(**{f"{field}__lt": flt.end})
    return q


def in_time_order(rows: QuerySet, key: Callable[[Any], tuple[datetime, int]]) -> Iterator[Any]:
    """Rows in (created_at, id) order, CHUNK at a time, each chunk an index range scan
    starting where the last ended (a keyset). Nothing stays open while a client reads:
    a server-side cursor outside a transaction is WITH HOLD, which PostgreSQL computes
    whole at its first fetch — a year of rows before the first line. `key` gives a row's
    (created_at, id)."""
    rows = rows.order_by("created_at", "id")
    last: tuple[datetime, int] | None = None
    while True:
        page = rows
        if last is not None:
            page = page.filter(created_at__gte=last[0]).exclude(created_at=last[0], id__lte=last[1])
        chunk = list(page[:CHUNK])
        yield from chunk
        if len(chunk) < CHUNK:
            return
        last = key(chunk[-1])


def _gate_kind(verdict: str) -> str:
    """A gate row's kind; a withholding at a way out other than a provider's is CG-14's."""
    return EGRESS_WITHHELD if verdict == EGRESS_WITHHELD_VERDICT else GATE_PREFIX + verdict


def _gate_records(flt: AuditFilter) -> Iterator[dict[str, Any]]:
    rows = GateAudit.objects.filter(_window("created_at", flt))
    if flt.configuration:
        rows = rows.filter(configuration=flt.configuration)
    if flt.kinds:
        verdicts = [k.removeprefix(GATE_PREFIX) for k in flt.kinds]
        if EGRESS_WITHHELD in flt.kinds:
            verdicts.append(EGRESS_WITHHELD_VERDICT)
        rows = rows.filter(verdict__in=verdicts)
    values = rows.values(*GATE_FIELDS)  # dicts: a third of a model instance's cost
    for row in in_time_order(values, key=lambda row: (row["created_at"], row["id"])):
        what = f"{row['source_kind']} {row['source_name']}".strip() or "system prompt"
        reason = (
            f"{what} (class {row['data_class']}) to zone {row['zone']}, ceiling {row['ceiling']}"
        )
        if not row["data_class"]:  # CG-3: nothing declared, so no zone was looked up
            reason = "no source declares a data class, so nothing was checked against a ceiling"
        reason += f", {row['enforcement']}{', forced' if row['forced'] else ''}"
        yield {
            "time": row["created_at"],
            "kind": _gate_kind(row["verdict"]),
            "run": row["run_id"],
            "configuration": row["configuration"],
            "actor": None,
            "decision": row["verdict"],
            "reason": reason,
        }


def _event_record(kind: str, payload: dict[str, Any]) -> tuple[str | None, str, str]:
    """(actor, decision, reason) of one event."""
    data = ev.parse(kind, payload)
    if isinstance(data, ev.TicketDecided):
        return data.by, data.decision, data.note
    if isinstance(data, ev.TicketApproved):  # HITL-13: one allow of a quorum
        count = f"{data.approvals} of {data.required}"
        return data.by, "approval", f"{count}; {data.note}".rstrip("; ")
    if isinstance(data, ev.SecretRedacted):
        return None, "redacted", f"{data.where}: {', '.join(data.kinds)}"
    return (data.by if isinstance(data, ev.RunCancelled) else None), "cancelled", ""


def _event_records(flt: AuditFilter) -> Iterator[dict[str, Any]]:
    kinds = [k for k in EVENT_KINDS if flt.wants(k)]
    if not kinds:
        return
    rows = Event.objects.filter(_window("created_at", flt), type__in=kinds)
    if flt.configuration:
        rows = rows.filter(run__configuration__slug=flt.configuration)
    rows = rows.annotate(configuration_slug=F("run__configuration__slug"))
    values = rows.values_list("created_at", "id", "type", "run_id", "configuration_slug", "payload")
    for created_at, _, kind, run_id, configuration, payload in in_time_order(
        values, key=lambda row: row[:2]
    ):
        actor, decision, reason = _event_record(kind, payload or {})
        yield {
            "time": created_at,
            "kind": kind,
            "run": run_id,
            "configuration": configuration,
            "actor": actor,
            "decision": decision,
            "reason": reason,
        }


def audit_records(flt: AuditFilter) -> Iterator[dict[str, Any]]:
    sources = [_event_records(flt)]
    if flt.wants_gate():
        sources.append(_gate_records(flt))
    return heapq.merge(*sources, key=lambda record: record["time"])


def audit_jsonl(flt: AuditFilter) -> Iterator[str]:
    for record in audit_records(flt):
        yield json.dumps({**record, "time": record["time"].isoformat()}) + "\n"


class _Line:
    """csv.writer writes into this and hands the line straight back."""

    def write(self, value: str) -> str:
        return value


# SEC-12: what a spreadsheet reads as the start of a formula (or of a DDE command).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A note typed as `=HYPERLINK(...)` must open as text: a leading ' makes it one."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def audit_csv(flt: AuditFilter) -> Iterator[str]:
    writer = csv.writer(_Line())
    yield writer.writerow(COLUMNS)
    for record in audit_records(flt):
        row = {**record, "time": record["time"].isoformat()}
        yield writer.writerow([csv_cell(row[c]) for c in COLUMNS])


CONTENT_TYPES = {"csv": "text/csv", "jsonl": "application/x-ndjson"}


LINES_PER_WRITE = 100


def _batched(lines: Iterator[str]) -> Iterator[str]:
    """A hundred lines per write: the response's per-item cost, not the lines, dominated a
    day's export (PERF-8)."""
    while batch := list(itertools.islice(lines, LINES_PER_WRITE)):
        yield "".join(batch)


def audit_export(flt: AuditFilter, fmt: str) -> tuple[Iterator[str], str, str]:
    """(lines, content type, file name) of the export in `fmt` (csv or jsonl), written a
    hundred lines at a time."""
    lines = _batched(audit_csv(flt) if fmt == "csv" else audit_jsonl(flt))
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    return lines, f"{CONTENT_TYPES[fmt]}; charset=utf-8", f"agentruns-audit-{stamp}.{fmt}"


def audit_response(flt: AuditFilter, fmt: str) -> StreamingHttpResponse:
    """The export as a streamed download, for the API and the admin's action alike."""
    lines, content_type, filename = audit_export(flt, fmt)
    response = StreamingHttpResponse(lines, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
