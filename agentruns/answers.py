"""Typed input for `ask_user` (HITL-6): the schema subset a question may use, and the
validation of an answer against it with a real JSON Schema implementation."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

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


def schema_problems(schema: Any) -> list[str]:
    """An object with typed properties, `required`, enums, string lengths, number bounds."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ['the schema must be an object schema ({"type": "object", ...})']
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
    required = schema.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(properties):
        problems.append("`required` must list declared properties")
    if not problems:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            problems.append(exc.message)
    return problems


def answer_errors(schema: dict[str, Any], value: Any) -> dict[str, list[str]]:
    """Per-field errors ("" for the whole value); empty when the answer is valid."""
    errors: dict[str, list[str]] = {}
    for error in Draft202012Validator(schema).iter_errors(value):
        path = "/".join(str(part) for part in error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            path = missing or path
        errors.setdefault(path, []).append(error.message)
    return errors
