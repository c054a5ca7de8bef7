"""Typed errors with the spec's stable codes. The API maps codes to HTTP statuses once
(agentruns.api.errors); services raise these and never think about HTTP."""

from __future__ import annotations

from typing import Any


class AgentrunsError(Exception):
    code = "error"

    def __init__(self, detail: str = "", **fields: Any) -> None:
        super().__init__(detail or self.code)
        self.detail = detail or self.code
        self.fields = fields

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "detail": self.detail, **self.fields}


class InvalidRequest(AgentrunsError):
    """Bad input the caller can fix; `fields` holds per-field errors."""

    code = "invalid"


class InvalidIdempotencyKey(InvalidRequest):
    """CLU-5, SEC-14: the Idempotency-Key is longer than its bound or not printable ASCII."""

    code = "invalid_idempotency_key"


class NotFound(AgentrunsError):
    code = "not_found"


class Conflict(AgentrunsError):
    code = "conflict"


class McpUnavailable(AgentrunsError):
    """MCP-1: the server could not be listed (down, slow, refused, or not allowed)."""

    code = "mcp_unavailable"


class NotPermitted(AgentrunsError):
    """The user may not do this (SEC-2, FS-5, HITL-9): cancel, steer, answer, force."""

    code = "not_permitted"


class OwnChangeRequest(NotPermitted):
    """GOV-3: a change request is approved by someone other than its requester."""

    code = "self_approval"


class ContextRefused(AgentrunsError):
    """CG-7, CG-8: the structured fields travel with the message."""

    code = "context_refused"
    generation: int | None = None  # the live catalog generation when it was asserted


class DailyLimitReached(AgentrunsError):
    """OPS-2: the configuration used its daily tokens; nothing more is sent today (UTC)."""

    code = "daily_limit_reached"


class Throttled(AgentrunsError):
    """SEC-14: the person started or answered too often; `retry_after` seconds to wait."""

    code = "throttled"


class BadSignature(AgentrunsError):
    """SCHED-4: a trigger's signature is missing, malformed, stale or wrong; nothing starts."""

    code = "bad_signature"


class PayloadTooLarge(AgentrunsError):
    code = "payload_too_large"


class Fenced(AgentrunsError):
    """CLU-2: this worker's lease was taken; it must stop without writing."""

    code = "fenced"


# HITL-3, in the order the resume service checks them (after who may answer: NotPermitted).
class ResumeError(AgentrunsError):
    pass


class NotAwaiting(ResumeError):
    code = "not_awaiting"


class CorrelationMismatch(ResumeError):
    code = "correlation_mismatch"


class RunMismatch(ResumeError):
    code = "run_mismatch"


class SnapshotMismatch(ResumeError):
    code = "snapshot_mismatch"


class CatalogMismatch(ResumeError):
    code = "catalog_mismatch"


class Expired(ResumeError):
    code = "expired"


class ResultKindMismatch(ResumeError):
    code = "result_kind_mismatch"


class CallMismatch(ResumeError):
    code = "call_mismatch"


class InvalidInput(ResumeError):
    code = "invalid_input"


class InvalidArguments(ResumeError):
    """HITL-12: edited arguments that do not fit the ticket's own tool; `fields` per field."""

    code = "invalid_arguments"


class SelfApproval(ResumeError):
    code = "self_approval"


class ArgumentsChanged(ResumeError):
    """HITL-12, HITL-13: another approver changed the arguments since this one looked."""

    code = "arguments_changed"


class AlreadyApproved(ResumeError):
    """HITL-13: this person's allow of these arguments is already counted."""

    code = "already_approved"
