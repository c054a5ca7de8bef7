"""A stdio MCP server for the suite (MCP-1): the demo tracker, spoken over stdin/stdout.
The deployer's list names it (tests/support/mcp.STDIO_COMMANDS); a process keeps it
running as its session with the server (INT-4)."""

from agentruns.demo_mcp import build_tracker

if __name__ == "__main__":
    build_tracker().run("stdio")
