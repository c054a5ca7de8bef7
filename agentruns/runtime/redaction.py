"""CG-11: API-key-, token- and password-shaped strings never leave or enter the log."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

MARKER = "[REDACTED:{kind}]"

PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private_key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]+?-----END [A-Z ]*PRIVATE KEY-----"),
    ),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}")),
    ("api_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b")),
    ("token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("token", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*")),
]
# `password: hunter2`, `api_key=...`: keep the name so the text still reads, drop the value.
ASSIGNMENT = re.compile(
    r"(?i)\b(password|passwd|pwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token|token)"
    r"(\s*[:=]\s*)(?!\[REDACTED)(\"[^\"]+\"|'[^']+'|\S+)"
)


def redact(text: str) -> tuple[str, dict[str, int]]:
    """The text with every secret replaced by a marker, and how many of each kind."""
    found: Counter[str] = Counter()
    for kind, pattern in PATTERNS:
        text, count = pattern.subn(MARKER.format(kind=kind), text)
        found[kind] += count

    def hide(match: re.Match[str]) -> str:
        found["password"] += 1
        return f"{match.group(1)}{match.group(2)}{MARKER.format(kind='password')}"

    text = ASSIGNMENT.sub(hide, text)
    return text, {kind: n for kind, n in found.items() if n}


def redact_value(value: Any) -> tuple[Any, dict[str, int]]:
    """Redact every string inside a JSON value, leaving its shape (and schema fit) alone."""
    found: Counter[str] = Counter()

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            clean, kinds = redact(node)
            found.update(kinds)
            return clean
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        return node

    return walk(value), dict(found)
