"""SEC-18: bounded everywhere. JSON a person, a host or a server sends is bounded in depth
and size before any recursive function sees it; a NUL in any page form is a 400; no input
is a 500."""

from __future__ import annotations

from agentruns.classes import DataClass
from agentruns.tools.mcp.listing import listed_tools
from agentruns.tools.registry import Effect, Tool, ToolOutput

SELF = {"$defs": {"node": {"$ref": "#/$defs/node"}}}
LOOPS = {
    "self": {"type": "object", "properties": {"x": {"$ref": "#/$defs/node"}}, **SELF},
    "mutual": {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/a"}},
        "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
    },
    "root": {"type": "object", "allOf": [{"$ref": "#"}]},
    "dangling": {"type": "object", "properties": {"x": {"$ref": "#/$defs/none"}}},
}
TREE = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#"}},
    },
}


def test_mcp_review_refuses_a_schema_whose_references_loop_and_keeps_recursive_data():
    """SEC-18, MCP-2: `$defs.node = {"$ref": "#/$defs/node"}` made every call raise
    RecursionError in the worker; review refuses it with the reason. A tree schema, whose
    references descend into the value, stays pinnable."""
    raw = [{"name": name, "description": "", "input_schema": s} for name, s in LOOPS.items()]
    raw.append({"name": "tree", "description": "", "input_schema": TREE})
    problems = {tool.name: tool.problem for tool in listed_tools("srv", raw)}
    assert "reference cycle" in problems["self"]
    assert "reference cycle" in problems["mutual"]
    assert "reference cycle" in problems["root"]
    assert "cannot resolve" in problems["dangling"]
    assert problems["tree"] == ""


def test_a_looping_schema_pinned_before_gives_the_model_an_error_not_a_dead_worker():
    """A tool pinned before review refused such schemas: checking its arguments is an
    error result for the model (the worker lives, the run is not re-asked to exhaustion)."""

    def never(arguments, context):
        return ToolOutput("ran")

    tool = Tool(
        name="srv.loop",
        description="",
        parameters=LOOPS["self"],
        group="srv",
        output_class=DataClass.PUBLIC,
        effect=Effect.READ_ONLY,
        version="v1",
        execute=never,
    )
    errors = tool.argument_errors({"x": 1})
    assert errors and "refers to itself" in errors[0]

