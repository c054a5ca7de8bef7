"""SEC-3: what any request may be, checked before a view sees it: bounded JSON depth,
pagination within the database's integer range, throttled submissions and answers."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.throttling import BaseThrottle

from agentruns.answers import bounds_problem
from agentruns.selectors import bounded_count
from agentruns.throttles import ScopeThrottle

# PostgreSQL's bigint: a larger id or offset is no row, never a database error.
MAX_ID = 2**63 - 1
MAX_OFFSET = 2**31 - 1


# SEC-18: deeper than any body the API takes; well within what the recursive code that
# reads a body (redaction, validation, serializers) can walk.
MAX_BODY_DEPTH = 128


class BoundedJSONParser(JSONParser):
    """A body nested deeper than MAX_BODY_DEPTH (or than Python's parser can), or holding
    a string PostgreSQL cannot store, is malformed (400), not a 500."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc
        # The body's size is bounded already (AGENTRUNS_MAX_BODY_BYTES): depth only.
        problem = bounds_problem(data, depth=MAX_BODY_DEPTH, items=None) or unstorable(data)
        if problem:
            raise ParseError(f"JSON parse error - {problem}.")
        return data


def unstorable(value: Any) -> str:
    """Why PostgreSQL would refuse a string of this JSON value ('' when it would not): text
    and jsonb hold no NUL character, and only whole UTF-16 surrogate pairs."""
    strings: list[Any] = [value]
    while strings:
        node = strings.pop()
        if isinstance(node, dict):
            strings.extend(node.keys())
            strings.extend(node.values())
        elif isinstance(node, list):
            strings.extend(node)
        elif isinstance(node, str):
            if "\x00" in node:
                return "strings may not contain NUL (\\u0000)"
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return "strings may not contain unpaired surrogates"
    return ""


class StorableRequestMiddleware:
    """The same rule for the path and the query string of every request (API and pages),
    and for every field of a page's form: a NUL there would reach a lookup or a row and
    make the database fail (SEC-3, SEC-18: an inbox note, an edited argument, a typed
    answer, a task, a fork's input). The API's bodies are JSON, checked by its parser."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        values = [request.path, *(v for _, vs in request.GET.lists() for v in vs)]
        where = "path or query"
        problem = unstorable(values)
        if not problem and request.method == "POST" and not request.path.startswith("/api/"):
            where, problem = "form", unstorable(_form_fields(request))
        if not problem:
            return self.get_response(request)
        detail = f"The request's {where} is malformed: {problem}."
        if request.path.startswith("/api/"):
            return JsonResponse({"code": "malformed", "detail": detail}, status=400)
        return HttpResponseBadRequest(detail)


def _form_fields(request: HttpRequest) -> list[str]:
    """A form's names and values; none for a body that is no form (or cannot be parsed:
    the view answers that as before)."""
    try:
        form = request.POST
    except MultiPartParserError:
        return []
    return [text for name, values in form.lists() for text in (name, *values)]


class Pagination(LimitOffsetPagination):
    """`count` is exact up to selectors.EXACT_COUNT_UP_TO, an estimate beyond (PERF-8)."""

    max_limit = 500

    def get_count(self, queryset: Any) -> int:
        if not isinstance(queryset, QuerySet):  # a list a service built (usage)
            return len(queryset)
        return bounded_count(queryset)[0]

    def get_offset(self, request: Any) -> int:
        return min(super().get_offset(request), MAX_OFFSET)


class ActionThrottle(BaseThrottle):
    """Throttles only the actions named in the view's `throttle_scopes` (action -> scope),
    counting in the same shared counter as the pages (`agentruns.throttles`, SEC-14)."""

    limit: ScopeThrottle | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        scope = getattr(view, "throttle_scopes", {}).get(getattr(view, "action", None))
        if not scope:
            return True
        self.limit = ScopeThrottle(scope)
        return self.limit.allow_request(request, view)

    def wait(self) -> float | None:
        return self.limit.wait() if self.limit else None
