"""Tools only the test suite registers, on import (child processes get them through
AGENTRUNS_EXTRA_TOOL_MODULES=tests.support.tools): an external write effect with a
watermark (TOOL-4's `uncertain` case), a tool that waits for a release file, a tool that
fails, and ones whose output is too sensitive for most zones."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agentruns.classes import DataClass
from agentruns.tools.registry import REGISTRY, Effect, Tool, ToolContext, ToolOutput


def effect_file() -> Path:
    return Path(os.environ.get("AGENTRUNS_TEST_EFFECT_FILE", "/tmp/agentruns-test-effects"))


def external_write(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    with effect_file().open("a") as handle:
        handle.write(f"{ctx.run_id}:{ctx.call_id}:{arguments['value']}\n")
    return ToolOutput(f"wrote {arguments['value']}")


def wait_for_release(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    started = Path(arguments["started"])
    started.write_text(str(os.getpid()))
    release = Path(arguments["release"])
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return ToolOutput("released")


def always_fail(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("this tool always fails")


def echo(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(str(arguments.get("text", "")))


def register_test_tools() -> None:
    obj = {"type": "object"}
    REGISTRY.register(
        Tool(
            name="test.external_write",
            description="Append a value to an external file (an effect outside the database).",
            parameters={**obj, "properties": {"value": {"type": "string"}}, "required": ["value"]},
            group="test",
            output_class=DataClass.PUBLIC,
            effect=Effect.WRITE,
            version="1",
            execute=external_write,
        )
    )
    REGISTRY.register(
        Tool(
            name="test.wait",
            description="Write a start file, then wait until a release file exists.",
            parameters={
                **obj,
                "properties": {"started": {"type": "string"}, "release": {"type": "string"}},
                "required": ["started", "release"],
            },
            group="test",
            output_class=DataClass.PUBLIC,
            effect=Effect.READ_ONLY,
            version="1",
            execute=wait_for_release,
            blocking=True,
        )
    )
    REGISTRY.register(
        Tool(
            name="test.fail",
            description="Always raises.",
            parameters=obj,
            group="test",
            output_class=DataClass.PUBLIC,
            effect=Effect.READ_ONLY,
            version="1",
            execute=always_fail,
        )
    )
    REGISTRY.register(
        Tool(
            name="test.echo",
            description="Echo the text back; a no-op read-only tool.",
            parameters={**obj, "properties": {"text": {"type": "string"}}},
            group="test",
            output_class=DataClass.PUBLIC,
            effect=Effect.READ_ONLY,
            version="1",
            execute=echo,
        )
    )
    REGISTRY.register(
        Tool(
            name="test.secret_lookup",
            description="Returns secret-class output.",
            parameters=obj,
            group="test",
            output_class=DataClass.SECRET,
            effect=Effect.READ_ONLY,
            version="1",
            execute=echo,
        )
    )
    REGISTRY.register(
        Tool(
            name="vault.customer_lookup",
            description="Returns a restricted customer record (MCP-4's built-in case).",
            parameters={**obj, "properties": {"customer": {"type": "string"}}},
            group="vault",
            output_class=DataClass.RESTRICTED,
            effect=Effect.READ_ONLY,
            version="1",
            execute=customer_lookup,
        )
    )


def customer_lookup(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    return ToolOutput(f"{arguments.get('customer', 'C-1')}: J. Doe, Berlin")


register_test_tools()
