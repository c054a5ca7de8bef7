"""A call's arguments against its tool's schema: a quick yes, else the full check.

The full check is `jsonschema`'s Python validator (with patterns on RE2, `answers.py`): its
findings are the messages the model reads. It takes ~25 µs for a call with one property,
twice a turn in the reference run (PERF-1), and most calls are valid, where all a check has
to say is yes. jsonschema-rs says that in a fraction of a microsecond.

It is asked only where the two cannot disagree: a schema whose every keyword the 2020-12
specification defines from the instance alone, with the same meaning in both. No reference
(nothing is ever fetched), no `pattern` (a hostile server's pattern runs on RE2, on the full
check only, MCP-2), no format assertion (the full check asserts none either), no keyword
whose equality or arithmetic differs by implementation (`uniqueItems`, `multipleOf`). A
call the quick check does not pass, or cannot read (a number that is not finite, an integer
past 64 bits), goes to the full check, which decides.
"""

from __future__ import annotations

import math
from typing import Any

import jsonschema_rs

# Keywords both validators take from the specification alone, and annotations.
SHARED_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "minProperties",
        "maxProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "format",  # an annotation in both, as neither is given a format checker
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
    }
)
SCHEMA_MAPS = ("properties",)  # name -> subschema
SCHEMA_LISTS = ("prefixItems", "allOf", "anyOf", "oneOf")
SCHEMA_VALUES = ("additionalProperties", "items", "not")


def quick_validator(schema: Any) -> Any | None:
    """jsonschema-rs's validator for a schema it reads exactly as the full check does;
    None for any other schema (it is then checked the full way only)."""
    if not _shared_only(schema):
        return None
    try:
        return jsonschema_rs.Draft202012Validator(schema, validate_formats=False)
    except Exception:  # a schema it refuses is left to the full check, which says why
        return None


def quickly_valid(validator: Any | None, arguments: Any) -> bool:
    """True only when the quick check passed the arguments; False means "ask the full
    check" (invalid, or a value it cannot convert, such as an integer past 64 bits)."""
    if validator is None or not _finite_numbers_only(arguments):
        return False
    try:
        return bool(validator.is_valid(arguments))
    except Exception:
        return False


def _finite_numbers_only(value: Any) -> bool:
    """No NaN or infinity anywhere: jsonschema-rs reads one as a value no bound applies to
    (`{"m": inf}` passes `maximum: 5`), where the full check refuses it."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return True


def _shared_only(schema: Any) -> bool:
    """Every subschema uses shared keywords only (walked, not recursed: a pinned server's
    schema may be deep)."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict) or not SHARED_KEYWORDS.issuperset(node):
            return False
        for key in SCHEMA_MAPS:
            if key in node:
                if not isinstance(node[key], dict):
                    return False
                pending.extend(node[key].values())
        for key in SCHEMA_LISTS:
            if key in node:
                if not isinstance(node[key], list):
                    return False
                pending.extend(node[key])
        pending.extend(node[key] for key in SCHEMA_VALUES if key in node)
    return True
