"""`GET /api/usage/` (OPS-1): tokens and cost per configuration per UTC day (staff)."""

from __future__ import annotations

from datetime import date

from django.utils.dateparse import parse_date
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import IsAdminUser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentruns.api.limits import Pagination
from agentruns.errors import InvalidRequest
from agentruns.services.usage import daily_usage


def _day(request: Request, name: str) -> date | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    day = parse_date(raw)
    if day is None:
        raise InvalidRequest("Bad date.", fields={name: ["Use YYYY-MM-DD."]})
    return day


class UsageView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        summary="Token usage and cost per configuration and day",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATE),
            OpenApiParameter("to", OpenApiTypes.DATE, description="Inclusive."),
            OpenApiParameter("configuration", str, description="A configuration's slug."),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        """[{configuration, day, input_tokens, output_tokens, cost, currency, priced}],
        newest day first."""
        rows = daily_usage(
            start=_day(request, "from"),
            end=_day(request, "to"),
            configuration=request.query_params.get("configuration") or None,
        )
        paginator = Pagination()  # SEC-14: every list a page at a time
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return paginator.get_paginated_response([row.as_dict() for row in page])
