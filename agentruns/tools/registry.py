"""TOOL-1: the registry. Classes and effects are properties of code, not of the database."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from jsonschema import Draft202012Validator

from agentruns.answers import AnswerValidator
from agentruns.classes import DataClass
from agentruns.frozen import quick
from agentruns.tools.arguments import quick_validator, quickly_valid
from agentruns.tools.names import WIRE_NAME, wire_name

# DEL-1: granted by a configuration's `delegates`, not by `allowed_tools`.
DELEGATE_TOOL = "agent.delegate"


class Effect(StrEnum):
    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    WRITE = "write"


class Human(StrEnum):
    """What a call waits for before it can finish, beyond the approval policy."""

    NONE = "none"
    INPUT = "input"  # ask_user: the answer is the result (HITL-6)
    TIMER = "timer"  # agent.wait: the clock answers, through the sweeper (SCHED-3)
    DELEGATION = "delegation"  # agent.delegate: a child run's end is the result (DEL-1)


@quick
@dataclass(frozen=True, slots=True)
class ToolContext:
    run_id: int
    thread_id: int
    turn_index: int
    call_id: str
    configuration_id: int
    # The current mode's deferred catalog and what is already active (tool_search, DEF-3).
    catalog: tuple[str, ...] = ()
    active: tuple[str, ...] = ()
    # MCP-3: how long a call outside this process may take (the configuration's).
    timeout_seconds: float = 30.0


@quick
@dataclass(frozen=True, slots=True)
class ToolOutput:
    content: str
    ok: bool = True
    # Structured extras the runtime reads (e.g. tool_search's added_tool_names).
    data: dict[str, Any] = field(default_factory=dict)
    # INT-3: no answer came back for a request that left (the server died, hung up or
    # timed out): the effect may have happened.
    uncertain: bool = False


# What a tool runs: its arguments and context in, its output back.
ToolFunction = Callable[[dict[str, Any], ToolContext], ToolOutput]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    group: str
    output_class: DataClass
    effect: Effect
    version: str
    execute: ToolFunction = field(compare=False, repr=False)
    deferred: bool = False
    # TOOL-4: the effect is a write to this application's database, so it runs inside the
    # transaction that records its result and can never happen without it.
    transactional: bool = False
    human: Human = Human.NONE
    # It waits on something outside this process (the network, a person): the executor
    # gives its pooled database connection back while it runs (PERF-6).
    blocking: bool = False

    @property
    def wire_name(self) -> str:
        return wire_name(self.name)

    @cached_property
    def validator(self) -> Draft202012Validator:
        # A pattern runs on RE2 (linear time): an MCP server's schema is hostile (MCP-2).
        return AnswerValidator(self.parameters)

    @cached_property
    def quick_validator(self) -> Any | None:
        return quick_validator(self.parameters)

    def argument_errors(self, arguments: dict[str, Any]) -> list[str]:
        if quickly_valid(self.quick_validator, arguments):
            return []
        try:
            return sorted(
                f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
                for error in self.validator.iter_errors(arguments)
            )
        except RecursionError:
            # SEC-18: review refuses such schemas now (mcp.listing); one pinned before
            # gives the model an error result, never a worker that dies on every attempt.
            return ["(root): the tool's schema refers to itself endlessly; it cannot be checked"]

    def one_line(self, limit: int = 120) -> str:
        text = " ".join(self.description.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def spec_digest_parts(self) -> list[Any]:
        return [self.name, self.version, self.parameters]


class Registry:
    """The tools registered in code, plus the MCP tools staff pinned (MCP-2), which
    `replace_pinned` swaps as a whole whenever the catalog generation moved on. A tool
    registered in code wins any clash of names or wire names."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._by_wire: dict[str, Tool] = {}
        # (by name, by wire name), replaced in one assignment: a reader on another thread
        # sees the old set or the new one, never half of each.
        self._pinned: tuple[dict[str, Tool], dict[str, Tool]] = ({}, {})

    def register(self, tool: Tool) -> Tool:
        Draft202012Validator.check_schema(tool.parameters)
        if not WIRE_NAME.match(tool.wire_name):
            raise ValueError(f"{tool.name!r} has no valid wire name")
        clash = self._by_wire.get(tool.wire_name)
        if clash and clash.name != tool.name:
            raise ValueError(f"{tool.name!r} and {clash.name!r} share a wire name")
        self._tools[tool.name] = tool
        self._by_wire[tool.wire_name] = tool
        return tool

    def replace_pinned(self, tools: Iterable[Tool]) -> None:
        by_name: dict[str, Tool] = {}
        by_wire: dict[str, Tool] = {}
        for tool in tools:
            taken = {tool.name, tool.wire_name} & {*self._tools, *self._by_wire, *by_wire}
            if taken or tool.name in by_name or not WIRE_NAME.match(tool.wire_name):
                continue
            by_name[tool.name] = by_wire[tool.wire_name] = tool
        self._pinned = (by_name, by_wire)

    def in_code(self) -> list[Tool]:
        """The tools registered in code (built-ins and the suite's), not pinned ones."""
        return sorted(self._tools.values(), key=lambda tool: tool.name)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name) or self._pinned[0].get(name)

    def by_wire(self, name: str) -> Tool | None:
        by_name, by_wire = self._pinned
        return (
            self._by_wire.get(name)
            or self._tools.get(name)
            or by_wire.get(name)
            or by_name.get(name)
        )

    def all(self) -> list[Tool]:
        every = {**self._pinned[0], **self._tools}
        return sorted(every.values(), key=lambda tool: tool.name)

    def groups(self) -> set[str]:
        return {tool.group for tool in self.all()}

    def expand(self, names_or_groups: Iterable[str]) -> set[str]:
        """A configuration's grant: tool names and whole groups (`notes`, or `tracker.*`
        for every tool of an MCP server)."""
        wanted = set(names_or_groups)
        return {
            tool.name for tool in self.all() if {tool.name, tool.group, f"{tool.group}.*"} & wanted
        }


REGISTRY = Registry()


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()
