"""MCP tool servers (§16): `listing` checks what a server lists and compares it with what
is pinned (pure), `client` talks to a server through the official `mcp` SDK (I/O), and
`pinned` turns the accepted tools into registered tools for every process."""
