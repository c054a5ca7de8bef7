"""The one place an error code becomes the sentence a page shows (the API keeps the codes).

Pages catch `AgentrunsError` from the services and call `sentence(error)`; a code without
words here falls back to the error's own detail, so nothing fails silently.
"""

from __future__ import annotations

from agentruns.errors import AgentrunsError

WORDS: dict[str, str] = {
    # Requests.
    "invalid": "Some of what was sent is not valid; see the fields below.",
    "not_found": "That does not exist, or you may not see it.",
    "conflict": "That cannot be done now: the run changed in the meantime.",
    "not_permitted": "You do not have permission to do that.",
    # CG-7, CG-8.
    "context_refused": (
        "The context gate refused this run: a source is classified above what the "
        "provider's zone may receive."
    ),
    "fenced": "Another worker took over this run; nothing was written.",
    # HITL-3, in the order the resume service checks them.
    "not_awaiting": "The run is no longer waiting for an answer; someone may have answered.",
    "correlation_mismatch": "This answer belongs to an earlier wait; the run has moved on.",
    "run_mismatch": "This answer belongs to another run.",
    "snapshot_mismatch": "The configuration changed since the question was asked.",
    "catalog_mismatch": "The tool catalog changed since the question was asked.",
    "expired": "The question expired; the run went on without an answer.",
    "result_kind_mismatch": "This kind of answer does not fit the question.",
    "call_mismatch": "The tool call changed since it was shown; nothing was decided.",
    "invalid_input": "The answer does not fit the question's form; see the fields below.",
    "self_approval": "Four-eyes: the person who started a run may not approve its tool calls.",
}


def sentence(error: AgentrunsError) -> str:
    """The words for an error; the detail is added when it says more than the code."""
    words = WORDS.get(error.code)
    if words is None:
        return error.detail
    if error.detail and error.detail != error.code:
        return f"{words} ({error.detail})"
    return words


def field_errors(error: AgentrunsError) -> dict[str, list[str]]:
    """Per-field messages an `invalid`/`invalid_input` error carries, for form display."""
    fields = error.fields.get("fields") or {}
    return {str(name): [str(m) for m in msgs] for name, msgs in fields.items()}


def failure_sentence(failure: dict) -> str:
    """A failed run's `failure` ({code, detail, …}) in words; CG-7's detail is the
    refusal message itself, naming the source and the remedies, never its text."""
    code, detail = str(failure.get("code", "")), str(failure.get("detail", ""))
    words = WORDS.get(code, "")
    return " ".join(part for part in (words, detail) if part and part != code) or code
