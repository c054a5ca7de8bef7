"""`GET /api/audit/?format=jsonl|csv` (OPS-5), streamed; staff with `agentruns.view_audit`."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import renderers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from agentruns.errors import InvalidRequest
from agentruns.policy import may_export_audit
from agentruns.services.audit import CONTENT_TYPES, AuditFilter, audit_response


class CanExportAudit(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return may_export_audit(request.user)


class JSONLinesRenderer(renderers.JSONRenderer):
    """Selected by `?format=jsonl`; errors are rendered as one JSON document."""

    media_type = CONTENT_TYPES["jsonl"]
    format = "jsonl"


class CSVRenderer(renderers.JSONRenderer):
    media_type = CONTENT_TYPES["csv"]
    format = "csv"


def parse_moment(raw: str | None, name: str, *, end: bool = False) -> datetime | None:
    """A date (the whole day; `to` includes it) or an ISO datetime, in UTC if naive."""
    if not raw:
        return None
    # The date first: parse_datetime also reads "2026-08-16", as that day's midnight,
    # which as `to` would exclude the very day it names.
    day = parse_date(raw)
    moment = parse_datetime(raw) if day is None else None
    if day is not None:
        moment = datetime.combine(day + timedelta(days=1) if end else day, time.min)
    if moment is None:
        raise InvalidRequest("Bad date.", fields={name: ["Use YYYY-MM-DD or ISO 8601."]})
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return moment


def audit_filter(params: Any) -> AuditFilter:
    kinds = [k.strip() for k in (params.get("kind") or "").split(",") if k.strip()]
    return AuditFilter(
        start=parse_moment(params.get("from"), "from"),
        end=parse_moment(params.get("to"), "to", end=True),
        configuration=params.get("configuration") or None,
        kinds=tuple(kinds),
    )


class AuditExportView(APIView):
    permission_classes = [CanExportAudit]
    renderer_classes = [JSONLinesRenderer, CSVRenderer]

    @extend_schema(
        summary="Export the audit trail (JSON lines or CSV)",
        parameters=[
            OpenApiParameter("format", str, enum=["jsonl", "csv"]),
            OpenApiParameter("from", OpenApiTypes.DATETIME, description="Date or datetime."),
            OpenApiParameter("to", OpenApiTypes.DATETIME, description="Inclusive date."),
            OpenApiParameter("configuration", str, description="A configuration's slug."),
            OpenApiParameter("kind", str, description="Comma-separated kinds."),
        ],
        responses={
            (200, CONTENT_TYPES["jsonl"]): OpenApiTypes.STR,
            (200, CONTENT_TYPES["csv"]): OpenApiTypes.STR,
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        """Gate decisions, approvals, denials, expiries, redactions and cancels in time order:
        time, kind, run, configuration, actor, decision, reason."""
        fmt = "csv" if request.accepted_renderer.format == "csv" else "jsonl"
        return audit_response(audit_filter(request.query_params), fmt)
