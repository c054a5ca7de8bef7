"""Typed input for `ask_user` (HITL-6): the schema subset a question may use, and the
validation of an answer against it with a real JSON Schema implementation.

The schema comes from the model, so it is hostile until checked (SEC-4, HITL-6): its size
is bounded and a `pattern` is run by RE2, whose time is linear in the input, never by
Python's backtracking engine (`(a+)+$` would take hours on a long answer).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError

PROPERTY_TYPES = {"string", "integer", "number", "boolean"}
PROPERTY_KEYWORDS = {
    "type",
    "title",
    "description",
    "enum",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "default",
}
MAX_PROPERTIES = 20
MAX_SCHEMA_CHARS = 16_000
MAX_ENUM = 100
MAX_PATTERN_CHARS = 500


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 1 << 20  # a pattern whose automaton needs more is refused
    return options


RE2_OPTIONS = _re2_options()


def compiled_pattern(pattern: str) -> Any:
    """RE2 or nothing: a pattern it cannot compile (backreferences, lookarounds, too big)
    is refused rather than handed to a backtracking engine."""
    return re2.compile(pattern, RE2_OPTIONS)


def _linear_pattern(
    validator: Any, pattern: str, instance: Any, schema: dict
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compiled_pattern(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


AnswerValidator = validators.extend(Draft202012Validator, {"pattern": _linear_pattern})


def _property_problems(name: str, spec: dict) -> list[str]:
    problems = []
    enum = spec.get("enum")
    if enum is not None and (
        not isinstance(enum, list)
        or len(enum) > MAX_ENUM
        or not all(isinstance(item, str | int | float | bool) for item in enum)
    ):
        problems.append(f"property {name!r}: `enum` is a list of at most {MAX_ENUM} scalars")
    pattern = spec.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
            problems.append(f"property {name!r}: `pattern` is a string of at most 500 characters")
        else:
            try:
                compiled_pattern(pattern)
            except re2.error:
                problems.append(f"property {name!r}: `pattern` is not a safe (RE2) expression")
    return problems


def schema_problems(schema: Any) -> list[str]:
    """An object with typed properties, `required`, enums, string lengths, number bounds."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ['the schema must be an object schema ({"type": "object", ...})']
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        return ["the schema must be plain JSON"]
    if size > MAX_SCHEMA_CHARS:
        return [f"the schema must stay under {MAX_SCHEMA_CHARS} characters"]
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return ["the schema needs at least one property"]
    problems = []
    if len(properties) > MAX_PROPERTIES:
        problems.append(f"at most {MAX_PROPERTIES} properties")
    for name, spec in properties.items():
        if not isinstance(spec, dict) or spec.get("type") not in PROPERTY_TYPES:
            problems.append(f"property {name!r} needs a type among {sorted(PROPERTY_TYPES)}")
            continue
        unknown = set(spec) - PROPERTY_KEYWORDS
        if unknown:
            problems.append(f"property {name!r} uses unsupported keywords {sorted(unknown)}")
            continue
        problems.extend(_property_problems(name, spec))
    required = schema.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(properties):
        problems.append("`required` must list declared properties")
    if not problems:
        try:
            AnswerValidator.check_schema(schema)
        except SchemaError as exc:
            problems.append(exc.message)
    return problems


def answer_errors(schema: dict[str, Any], value: Any) -> dict[str, list[str]]:
    """Per-field errors ("" for the whole value); empty when the answer is valid."""
    errors: dict[str, list[str]] = {}
    for error in AnswerValidator(schema).iter_errors(value):
        path = "/".join(str(part) for part in error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            path = missing or path
        errors.setdefault(path, []).append(error.message)
    return errors
