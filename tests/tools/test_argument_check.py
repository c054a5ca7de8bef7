"""TOOL-2's argument validation: jsonschema-rs's quick yes never says yes where the full
check (jsonschema, the messages the model reads) says no (PERF-1)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentruns.classes import DataClass
from agentruns.tools.arguments import quick_validator, quickly_valid
from agentruns.tools.registry import Effect, Tool, ToolOutput

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"x": {"type": "integer"}}},
    {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 5},
            "tags": {"type": "array", "items": {"enum": ["a", "b", 1]}, "maxItems": 2},
            "when": {"type": "string", "format": "date-time"},
            "n": {"type": "number", "minimum": 0, "exclusiveMaximum": 10},
        },
        "required": ["title"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "pick": {"anyOf": [{"type": "integer"}, {"const": "none"}]},
            "one": {"oneOf": [{"type": "integer"}, {"type": "number", "maximum": 3}]},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}]},
            "no": {"not": {"type": "null"}},
        },
        "minProperties": 1,
    },
    {"type": "object", "properties": {"m": {"maximum": 5}, "k": {"minimum": 0}}},
]

NAMES = st.sampled_from(
    ["x", "title", "tags", "when", "n", "pick", "one", "pair", "no", "m", "k", "other"]
)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.sampled_from([math.inf, -math.inf, math.nan])  # a model may send them: json reads them
    | st.sampled_from(["", "a", "abcdef", "none", "2026-12-06T14:00:00Z", "not a date"])
)
JSON = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=4),
    max_leaves=8,
)
# A call's arguments are an object, as a rule of the schemas' own property names.
ARGUMENTS = st.dictionaries(NAMES, LEAVES | JSON, max_size=4) | JSON


def _tool(schema: dict[str, Any]) -> Tool:
    return Tool(
        name="t.check",
        description="",
        parameters=schema,
        group="t",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="1",
        execute=lambda arguments, ctx: ToolOutput(""),
    )


def _full_check(tool: Tool, arguments: Any) -> bool:
    return not list(tool.validator.iter_errors(arguments))


@pytest.mark.parametrize("schema", SCHEMAS, ids=range(len(SCHEMAS)))
@settings(max_examples=300, deadline=None)
@given(arguments=ARGUMENTS)
def test_tool2_the_quick_check_passes_exactly_what_the_full_check_passes_perf1(
    schema: dict[str, Any], arguments: Any
) -> None:
    tool = _tool(schema)
    assert tool.quick_validator is not None
    quick = quickly_valid(tool.quick_validator, arguments)
    if quick:
        assert _full_check(tool, arguments), arguments
    assert (tool.argument_errors(arguments) == []) == _full_check(tool, arguments)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "^a+$"}}},
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
        {"$ref": "https://example.com/schema.json"},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}},
        {"type": "array", "uniqueItems": True},
        {"type": "number", "multipleOf": 0.1},
        {"type": "object", "properties": {"a": {"if": {"type": "string"}}}},
        {"type": "object", "properties": ["not", "a", "map"]},
        {"type": "array", "items": [{"type": "string"}]},
        "not a schema",
    ],
)
def test_tool2_a_schema_beyond_the_shared_keywords_gets_the_full_check_only_mcp2(
    schema: Any,
) -> None:
    """References are never fetched, patterns run on RE2 only: such schemas never reach
    the quick check."""
    assert quick_validator(schema) is None


@pytest.mark.parametrize(
    "arguments",
    [
        {"m": float("inf")},
        {"k": -float("inf")},
        {"m": float("nan")},
        {"m": [1, {"x": [float("inf")]}]},
    ],
    ids=["inf", "-inf", "nan", "nested"],
)
def test_tool2_a_number_that_is_not_finite_never_passes_the_quick_check(arguments: Any) -> None:
    """jsonschema-rs reads an infinite number as nothing a bound applies to, where the full
    check refuses `{"m": inf}` against `maximum: 5` (the loop refuses such arguments before
    either, SEC-7: the quick check must not lean on that)."""
    tool = _tool(SCHEMAS[3])
    assert quickly_valid(tool.quick_validator, arguments) is False
    assert (tool.argument_errors(arguments) == []) == _full_check(tool, arguments)


def test_tool2_arguments_the_quick_check_cannot_read_go_to_the_full_check() -> None:
    tool = _tool({"type": "object", "properties": {"x": {"type": "integer", "maximum": 5}}})
    assert quickly_valid(tool.quick_validator, {"x": 3}) is True
    huge = {"x": 10**40}
    assert quickly_valid(tool.quick_validator, huge) is False
    assert tool.argument_errors(huge) == [f"x: {10**40} is greater than the maximum of 5"]


def test_tool2_invalid_arguments_keep_the_full_checks_messages() -> None:
    tool = _tool(SCHEMAS[1])
    assert tool.argument_errors({"title": "", "extra": 1}) == [
        "(root): Additional properties are not allowed ('extra' was unexpected)",
        "title: '' should be non-empty",
    ]
