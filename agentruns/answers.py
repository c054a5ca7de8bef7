"""Typed input for `ask_user` (HITL-6, SEC-7): the schema subset a question may use, and
the validation of an answer against it with a real JSON Schema implementation.

The schema comes from the model, so it is hostile until checked. It is accepted only from
a closed set of keywords, each where its type gives it meaning, bounded in size and depth,
with no references and no `patternProperties`: a reference makes a validator fetch or
fail (a 500 on every answer), deep nesting makes it recurse out, and a pattern it runs
with Python's backtracking engine can hold a web process for hours on a short answer.
A `pattern` is run by RE2, whose time is linear in the input. Checking an answer is then
bounded by the answer's size times the schema's, both capped.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import re2
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError

# SEC-7's closed set, by the type each keyword constrains.
COMMON_KEYWORDS = frozenset({"type", "title", "description", "default", "enum", "const"})
TYPE_KEYWORDS = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "string": frozenset({"minLength", "maxLength", "pattern"}),
    "integer": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}),
    "boolean": frozenset(),
}
SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
MAX_NESTING = 4  # objects and arrays inside one another, the question itself included
MAX_PROPERTIES = 20
MAX_SCHEMA_CHARS = 16_000
MAX_ENUM = 100
MAX_PATTERN_CHARS = 500
MAX_NAME_CHARS = 64


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 1 << 20  # a pattern whose automaton needs more is refused
    return options


RE2_OPTIONS = _re2_options()


@functools.lru_cache(maxsize=256)
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


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _values_problems(where: str, spec: dict[str, Any]) -> list[str]:
    problems = []
    enum = spec.get("enum")
    if enum is not None and not (
        isinstance(enum, list) and 0 < len(enum) <= MAX_ENUM and all(map(_is_scalar, enum))
    ):
        problems.append(f"{where}: `enum` is a non-empty list of at most {MAX_ENUM} scalars")
    if "const" in spec and not _is_scalar(spec["const"]):
        problems.append(f"{where}: `const` is a scalar")
    default = spec.get("default")
    if not _is_scalar(default) and not (
        isinstance(default, list) and len(default) <= MAX_ENUM and all(map(_is_scalar, default))
    ):
        problems.append(f"{where}: `default` is a scalar or a list of scalars")
    return problems


def _pattern_problems(where: str, pattern: Any) -> list[str]:
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        return [f"{where}: `pattern` is a string of at most {MAX_PATTERN_CHARS} characters"]
    try:
        compiled_pattern(pattern)
    except re2.error:
        return [f"{where}: `pattern` is not a safe (RE2) expression"]
    return []


def _object_problems(where: str, spec: dict[str, Any], nesting: int) -> list[str]:
    properties = spec.get("properties")
    if not isinstance(properties, dict) or not properties:
        return [f"{where}: an object needs at least one property"]
    if len(properties) > MAX_PROPERTIES:
        return [f"{where}: at most {MAX_PROPERTIES} properties"]
    problems = []
    for name, inner in properties.items():
        if not 0 < len(name) <= MAX_NAME_CHARS or "." in name or "/" in name:
            problems.append(
                f"{where}: property {name[:MAX_NAME_CHARS]!r} needs a name of 1 to "
                f"{MAX_NAME_CHARS} characters without '.' or '/'"
            )
            continue
        problems += _node_problems(f"{where}/{name}" if where else name, inner, nesting + 1)
    required = spec.get("required", [])
    if not isinstance(required, list) or not set(map(str, required)) <= set(properties):
        problems.append(f"{where or 'the schema'}: `required` must list declared properties")
    if spec.get("additionalProperties", False) is not False:
        problems.append(f"{where or 'the schema'}: `additionalProperties` may only be false")
    return problems


def _node_problems(where: str, spec: Any, nesting: int) -> list[str]:
    """Why `spec` (at path `where`) is outside the accepted subset; [] when it is inside."""
    shown = where or "the schema"
    kind = spec.get("type") if isinstance(spec, dict) else None
    if not isinstance(kind, str) or kind not in TYPE_KEYWORDS:
        return [f"{shown}: needs a `type` among {sorted(TYPE_KEYWORDS)}"]
    allowed = COMMON_KEYWORDS | TYPE_KEYWORDS[kind]
    unknown = set(spec) - allowed
    if unknown:
        return [
            f"{shown}: unsupported keywords {sorted(unknown)[:5]} (a {kind} may use "
            f"{sorted(allowed)})"
        ]
    problems = _values_problems(shown, spec)
    if "pattern" in spec:
        problems += _pattern_problems(shown, spec["pattern"])
    if kind in ("object", "array") and nesting > MAX_NESTING:
        return [*problems, f"{shown}: objects and arrays nest at most {MAX_NESTING} deep"]
    if kind == "object":
        problems += _object_problems(where, spec, nesting)
    elif kind == "array":
        items = spec.get("items")
        if not isinstance(items, dict) or items.get("type") not in SCALAR_TYPES:
            problems.append(f"{shown}: `items` is a schema of a scalar type (one per line)")
        else:
            problems += _node_problems(f"{where}/items", items, nesting + 1)
    return problems


def schema_problems(schema: Any) -> list[str]:
    """[] when `schema` is a question agentruns may ask, else what the model must change."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ['the schema must be an object schema ({"type": "object", ...})']
    try:
        size = len(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return ["the schema must be plain JSON"]
    if size > MAX_SCHEMA_CHARS:
        return [f"the schema must stay under {MAX_SCHEMA_CHARS} characters"]
    problems = _node_problems("", schema, 1)
    if not problems:
        try:
            AnswerValidator.check_schema(schema)
        except SchemaError as exc:
            problems.append(exc.message)
    return problems


# SEC-18: what a person, a host or a server may send as one JSON value (an answer, edited
# arguments), checked before anything recursive (redaction, validation) walks it.
MAX_VALUE_DEPTH = 64
MAX_VALUE_ITEMS = 10_000


def bounds_problem(
    value: Any, *, depth: int = MAX_VALUE_DEPTH, items: int | None = MAX_VALUE_ITEMS
) -> str:
    """Why `value` is out of bounds ('' when it is not): objects and arrays nested deeper
    than `depth`, or more than `items` values in all. Walked without recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while pending:
        node, level = pending.pop()
        seen += 1
        if items is not None and seen > items:
            return f"it holds more than {items} values"
        if isinstance(node, dict | list):
            if level >= depth:
                return f"it is nested deeper than {depth} levels"
            children = node.values() if isinstance(node, dict) else node
            pending.extend((child, level + 1) for child in children)
    return ""


def answer_errors(schema: dict[str, Any], value: Any) -> dict[str, list[str]]:
    """Per-field errors ("" for the whole value); empty when the answer is valid. A schema
    outside the subset (a ticket written before SEC-7) is never run: every answer to it
    is refused, so its ticket ends by expiry or cancel instead of a 500."""
    if schema_problems(schema):
        return {"": ["The question's schema is not one agentruns can check."]}
    return field_errors(AnswerValidator(closed(schema)), value)


def closed(spec: dict[str, Any]) -> dict[str, Any]:
    """HITL-6: an answer carries only the properties its question names. The subset allows
    no other value of `additionalProperties`, so an object that leaves it out is closed."""
    if spec.get("type") != "object":
        return spec
    properties = {name: closed(inner) for name, inner in spec.get("properties", {}).items()}
    return {**spec, "properties": properties, "additionalProperties": False}


def field_errors(validator: Any, value: Any) -> dict[str, list[str]]:
    """`validator`'s complaints about `value`, by the path of the field each names (a
    missing required property is named by its own path, where a form shows it)."""
    errors: dict[str, list[str]] = {}
    for error in validator.iter_errors(value):
        path = "/".join(str(part) for part in error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            path = f"{path}/{missing}" if path and missing else missing or path
        errors.setdefault(path, []).append(said(error))
    return errors


TYPE_WORDS = {
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "boolean": "true or false",
    "object": "a set of fields",
    "array": "a list",
}


def said(error: ValidationError) -> str:
    """A schema checker's complaint as the person who typed the value reads it, never its
    Python wording ("'abc' is not of type 'integer'")."""
    rule, limit, value = error.validator, error.validator_value, error.instance
    if rule == "type":
        kinds = limit if isinstance(limit, list) else [limit]
        return "Give " + " or ".join(TYPE_WORDS.get(str(k), str(k)) for k in kinds) + "."
    if rule == "enum" and isinstance(limit, list):
        return "Choose one of: " + ", ".join(map(str, limit)) + "."
    if rule == "const":
        return f"Only {limit} is accepted."
    if rule == "required":
        return "Required."
    if rule == "additionalProperties":
        named = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(set(value) - set(named)) if isinstance(value, dict) else []
        return "Not a field of this question: " + ", ".join(map(str, extra)) + "."
    words = {
        "minimum": f"At least {limit}.",
        "maximum": f"At most {limit}.",
        "exclusiveMinimum": f"More than {limit}.",
        "exclusiveMaximum": f"Less than {limit}.",
        "minLength": f"At least {limit} characters.",
        "maxLength": f"At most {limit} characters.",
        "minItems": f"At least {limit} items.",
        "maxItems": f"At most {limit} items.",
        "pattern": "Not in the expected form.",
    }
    return words.get(str(rule), error.message)
