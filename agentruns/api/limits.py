"""SEC-3: what any request may be, checked before a view sees it: bounded JSON depth,
pagination within the database's integer range, throttled submissions and answers."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle

# PostgreSQL's bigint: a larger id or offset is no row, never a database error.
MAX_ID = 2**63 - 1
MAX_OFFSET = 2**31 - 1


class BoundedJSONParser(JSONParser):
    """A body nested deeper than Python's recursion limit is malformed (400), not a 500."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc


class Pagination(LimitOffsetPagination):
    max_limit = 500

    def get_offset(self, request: Any) -> int:
        return min(super().get_offset(request), MAX_OFFSET)


class ActionThrottle(ScopedRateThrottle):
    """Throttles only the actions named in the view's `throttle_scopes` (action -> scope),
    at the rates in REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] read on each request."""

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = getattr(view, "throttle_scopes", {}).get(getattr(view, "action", None))
        if not self.scope:
            return True
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        if not rate:
            return True
        self.rate = str(rate)
        self.num_requests, self.duration = self.parse_rate(self.rate)
        # ScopedRateThrottle.allow_request would re-read the scope from the view.
        return super(ScopedRateThrottle, self).allow_request(request, view)
