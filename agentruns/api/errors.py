"""The one place error codes become HTTP statuses (§11)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db.models import ProtectedError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from agentruns.errors import AgentrunsError

STATUS_BY_CODE = {
    "invalid": status.HTTP_400_BAD_REQUEST,
    "malformed": status.HTTP_400_BAD_REQUEST,
    "invalid_idempotency_key": status.HTTP_400_BAD_REQUEST,
    "not_found": status.HTTP_404_NOT_FOUND,
    "conflict": status.HTTP_409_CONFLICT,
    # A server agentruns depends on failed; a 4xx, as nothing here is broken (SEC-3).
    "mcp_unavailable": status.HTTP_424_FAILED_DEPENDENCY,
    "context_refused": status.HTTP_409_CONFLICT,
    "not_permitted": status.HTTP_403_FORBIDDEN,
    "self_approval": status.HTTP_403_FORBIDDEN,
    "not_authenticated": status.HTTP_401_UNAUTHORIZED,
    "bad_signature": status.HTTP_401_UNAUTHORIZED,
    "payload_too_large": status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    "expired": status.HTTP_410_GONE,
    "invalid_input": status.HTTP_422_UNPROCESSABLE_ENTITY,
    "invalid_arguments": status.HTTP_422_UNPROCESSABLE_ENTITY,
    "already_approved": status.HTTP_409_CONFLICT,
    "arguments_changed": status.HTTP_409_CONFLICT,
    "result_kind_mismatch": status.HTTP_422_UNPROCESSABLE_ENTITY,
    "not_awaiting": status.HTTP_409_CONFLICT,
    "correlation_mismatch": status.HTTP_409_CONFLICT,
    "run_mismatch": status.HTTP_409_CONFLICT,
    "snapshot_mismatch": status.HTTP_409_CONFLICT,
    "catalog_mismatch": status.HTTP_409_CONFLICT,
    "call_mismatch": status.HTTP_409_CONFLICT,
    "daily_limit_reached": status.HTTP_429_TOO_MANY_REQUESTS,
    "throttled": status.HTTP_429_TOO_MANY_REQUESTS,
}


def error_response(code: str, detail: str, **fields: Any) -> Response:
    return Response(
        {"code": code, "detail": detail, **fields},
        status=STATUS_BY_CODE.get(code, status.HTTP_400_BAD_REQUEST),
    )


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, AgentrunsError):
        return error_response(exc.code, exc.detail, **exc.fields)
    if isinstance(exc, RequestDataTooBig):
        return error_response("payload_too_large", "The request body is too large.")
    if isinstance(exc, exceptions.ValidationError):
        return error_response("invalid", "The request has invalid fields.", fields=exc.detail)
    if isinstance(exc, exceptions.ParseError):
        return error_response("malformed", str(exc.detail))
    if isinstance(exc, Http404 | exceptions.NotFound):
        return error_response("not_found", "Not found.")
    if isinstance(exc, ProtectedError):
        return error_response("conflict", "Still referenced by other records; not deleted.")
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        # Always 401 (DRF answers 403 when session auth comes first); the header says how.
        refused = error_response("not_authenticated", str(exc.detail))
        refused["WWW-Authenticate"] = 'Token realm="api"'
        return refused
    if isinstance(exc, exceptions.PermissionDenied | DjangoPermissionDenied):
        return error_response("not_permitted", "You may not do this.")
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        response.data = {"code": exc.default_code, "detail": str(exc.detail)}
    return response
