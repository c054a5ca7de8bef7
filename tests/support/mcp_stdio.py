"""A stdio MCP server for the suite (MCP-1): the demo tracker, spoken over stdin/stdout.
The deployer's list names it (tests/support/mcp.STDIO_COMMANDS); the SDK starts it for
each use and stops it after."""

from agentruns.demo_mcp import build_tracker

if __name__ == "__main__":
    build_tracker().run("stdio")
