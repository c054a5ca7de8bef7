"""MCP-2: what a server's `tools/list` said, checked as hostile input, versioned, and
compared with what is pinned. Pure functions over plain values.

A listed tool is pinnable when its name makes a valid, unique provider wire name, its
description is bounded, and its input schema is one agentruns can run on a model's
arguments in bounded time: a bounded JSON Schema object with only local references and
patterns RE2 accepts (the registry's validator runs them with RE2, never a backtracking
engine). Anything else is listed with the reason and cannot be accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agentruns.answers import compiled_pattern
from agentruns.tools.names import WIRE_NAME, wire_name
from agentruns.tools.registry import digest

MAX_TOOLS = 200
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_CHARS = 32_000
MAX_SCHEMA_DEPTH = 16
MAX_PATTERN_CHARS = 500
# What MCP allows in a tool name (SEP-986), bounded so `<server>.<tool>` fits 64.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")

ADDED, CHANGED, UNCHANGED, REMOVED, REFUSED = "added", "changed", "unchanged", "removed", "refused"


@dataclass(frozen=True)
class Listed:
    """One tool as listed; `problem` says why it cannot be pinned ("" when it can)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    version: str
    problem: str = ""


VERSION_CHARS = 16  # 64 bits of the digest: what an invocation row keeps of a version


def tool_version(name: str, description: str, schema: Any) -> str:
    """MCP-2: a digest of the name, description and schema; any change is a new version."""
    whole = digest({"name": name, "description": description, "input_schema": schema})
    return whole[:VERSION_CHARS]


def registry_name(server: str, tool: str) -> str:
    return f"{server}.{tool}"


def reserved_slugs(code_names: Iterable[str], code_groups: Iterable[str]) -> set[str]:
    """Slugs no server may take: a code tool's group, or the part of a code tool's wire
    name before its first `_` (a server `notes` would make `notes.read` again). Slugs hold
    no `_`, so `<slug>_` starts the wire names of one server only: a wire name is unique
    and leads back to its tool."""
    return {*code_groups, *(wire_name(name).split("_", 1)[0] for name in code_names)}


def slug_problem(slug: str, reserved: set[str]) -> str | None:
    if slug in reserved:
        return f"{slug!r} is taken by tools registered in code ({', '.join(sorted(reserved))})."
    return None


def listed_tools(
    server: str, raw: Sequence[Any], clash: Callable[[str], str | None] = lambda _: None
) -> list[Listed]:
    """Each raw entry ({name, description, input_schema}) checked in listing order;
    `clash(registry_name)` names a tool registered in code that the name would shadow."""
    found: list[Listed] = []
    names: set[str] = set()
    wires: dict[str, str] = {}
    for entry in list(raw)[:MAX_TOOLS]:
        listed = _checked(server, entry, clash)
        full = registry_name(server, listed.name)
        if not listed.problem and listed.name in names:
            listed = _refused(listed, "the server lists this name twice")
        elif not listed.problem and wire_name(full) in wires:
            listed = _refused(
                listed, f"its provider name {wire_name(full)} is also {wires[wire_name(full)]}'s"
            )
        names.add(listed.name)
        wires.setdefault(wire_name(full), full)
        found.append(listed)
    return found


def _refused(listed: Listed, problem: str) -> Listed:
    return Listed(listed.name, listed.description, listed.input_schema, listed.version, problem)


def _checked(server: str, entry: Any, clash: Callable[[str], str | None]) -> Listed:
    entry = entry if isinstance(entry, dict) else {}
    raw_name = entry.get("name")
    name = raw_name if isinstance(raw_name, str) else ""
    description = entry.get("description") if isinstance(entry.get("description"), str) else ""
    schema = entry.get("input_schema")
    version = tool_version(name, description, schema)
    shown = Listed(name[:64], description[:MAX_DESCRIPTION_CHARS], _as_dict(schema), version)
    problem = (
        _name_problem(server, name, clash)
        or _description_problem(description)
        or schema_problem(schema)
    )
    return _refused(shown, problem) if problem else shown


def _as_dict(schema: Any) -> dict[str, Any]:
    return schema if isinstance(schema, dict) else {}


def _name_problem(server: str, name: str, clash: Callable[[str], str | None]) -> str:
    if not TOOL_NAME.match(name):
        return "its name is not 1 to 64 letters, digits, '_', '-' or '.'"
    full = registry_name(server, name)
    if not WIRE_NAME.match(wire_name(full)) or len(full) > 64:
        return f"{full} is longer than the 64 characters a provider accepts in a tool name"
    shadowed = clash(full)
    return f"it would shadow {shadowed}" if shadowed else ""


def _description_problem(description: str) -> str:
    if len(description) > MAX_DESCRIPTION_CHARS:
        return f"its description is over {MAX_DESCRIPTION_CHARS} characters"
    return ""


def schema_problem(schema: Any) -> str:
    """Why a model's arguments could not be checked against `schema` safely, or ""."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'its input schema is not an object schema ({"type": "object", ...})'
    try:
        size = len(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return "its input schema is not plain JSON"
    if size > MAX_SCHEMA_CHARS:
        return f"its input schema is over {MAX_SCHEMA_CHARS} characters"
    for problem in _node_problems(schema, 0):
        return f"its input schema {problem}"
    problem = _reference_problem(schema)
    if problem:
        return f"its input schema {problem}"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"its input schema is not valid JSON Schema ({exc.message[:200]})"
    return ""


def _node_problems(node: Any, depth: int) -> Iterator[str]:
    if depth > MAX_SCHEMA_DEPTH:
        yield f"nests deeper than {MAX_SCHEMA_DEPTH} levels"
        return
    if isinstance(node, list):
        for item in node:
            yield from _node_problems(item, depth + 1)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("$ref", "$dynamicRef") and not (
            isinstance(value, str) and value.startswith("#")
        ):
            yield "refers outside itself (only local references are followed)"
        elif key == "patternProperties":
            yield "uses patternProperties"
        elif key == "pattern" and isinstance(value, str) and not _linear(value):
            yield f"has a pattern RE2 cannot run: {value[:80]!r}"
        yield from _node_problems(value, depth + 1)


# Keywords whose subschemas apply to the same instance: following only these, a validator
# never moves into the arguments, so a cycle of them is a loop without end (SEC-18).
IN_PLACE_ONE = ("$ref", "$dynamicRef", "not", "if", "then", "else")
IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")


def _reference_problem(schema: dict[str, Any]) -> str:
    """SEC-18, MCP-2: every reference must name a part of the schema by JSON pointer, and
    no chain of references and in-place keywords may lead back to where it started
    (`{"$defs": {"node": {"$ref": "#/$defs/node"}}}` made every call recurse out). A
    reference inside a property or an item is fine: each step descends into the value,
    which is bounded."""
    nodes: dict[int, dict[str, Any]] = {}
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            nodes[id(node)] = node
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    edges: dict[int, list[int]] = {}
    for key, node in nodes.items():
        targets: list[Any] = [node.get(name) for name in IN_PLACE_ONE[2:]]
        targets += [item for name in IN_PLACE_MANY for item in _as_list(node.get(name))]
        for name in IN_PLACE_ONE[:2]:
            if name in node:
                target = _pointer(schema, node[name])
                if target is None:
                    return f"has a reference it cannot resolve: {str(node[name])[:80]!r}"
                targets.append(target)
        edges[key] = [id(target) for target in targets if isinstance(target, dict)]
    if _has_cycle(edges):
        return "refers to itself without descending into the arguments (a reference cycle)"
    return ""


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _pointer(schema: dict[str, Any], ref: Any) -> Any:
    """The part of `schema` a local reference ("#", "#/$defs/a") names; None if none."""
    if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
        return None
    node: Any = schema
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _has_cycle(edges: dict[int, list[int]]) -> bool:
    """Depth-first, without recursion: a node met again while still on the path."""
    done: set[int] = set()
    for start in edges:
        if start in done:
            continue
        path: set[int] = {start}
        stack: list[tuple[int, Iterator[int]]] = [(start, iter(edges[start]))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.discard(node)
                done.add(node)
            elif child in path:
                return True
            elif child not in done:
                path.add(child)
                stack.append((child, iter(edges.get(child, []))))
    return False


def _linear(pattern: str) -> bool:
    if len(pattern) > MAX_PATTERN_CHARS:
        return False
    try:
        compiled_pattern(pattern)
    except Exception:
        return False
    return True


@dataclass(frozen=True)
class Change:
    """One row of the difference staff review before accepting a listing."""

    name: str
    kind: str
    listed: Listed | None = None
    pinned_version: str = ""

    @property
    def problem(self) -> str:
        return self.listed.problem if self.listed else ""


def difference(pinned: Mapping[str, str], listed: Sequence[Listed]) -> list[Change]:
    """Against the pinned versions by tool name: what accepting `listed` would add,
    change (a new version: approvals of the old one are refused, HITL-10), keep, remove,
    and what it cannot pin."""
    changes = []
    seen = set()
    for tool in listed:
        seen.add(tool.name)
        before = pinned.get(tool.name, "")
        if tool.problem:
            kind = REFUSED
        elif not before:
            kind = ADDED
        else:
            kind = UNCHANGED if before == tool.version else CHANGED
        changes.append(Change(tool.name, kind, tool, before))
    changes.extend(
        Change(name, REMOVED, None, version)
        for name, version in sorted(pinned.items())
        if name not in seen
    )
    return changes


def listing_digest(raw: Any) -> str:
    """What staff reviewed: accepting is refused if the listing changed since."""
    return digest(raw)
