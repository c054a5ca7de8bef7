"""MCP-5: the demo's own MCP server, a small ticket tracker built with the official SDK's
`MCPServer`: `get_ticket` (a read; the demo classes it internal), `add_comment` (a write,
so a run needs an approval to call it) and `customer_lookup` (a read of restricted
customer records). `manage.py serve` runs it on AGENTRUNS_DEMO_MCP_URL beside the web
server and the cluster:

    python -m agentruns.demo_mcp --host 127.0.0.1 --port 8765

It keeps its tickets in memory (a restart forgets the comments) and needs no Django.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NAME = "tracker"


@dataclass
class Tracker:
    tickets: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "T-1": {
                "title": "Checkout page times out",
                "status": "open",
                "customer": "C-4411",
                "comments": ["Seen since the 14:00 deploy."],
            },
            "T-2": {
                "title": "Invoice PDF has the wrong VAT rate",
                "status": "open",
                "customer": "C-7310",
                "comments": [],
            },
        }
    )
    # Every call it was asked, in order: (tool, arguments), as a tracker's audit log.
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    customers: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "C-4411": {"name": "J. Doe", "email": "j.doe@example.com", "city": "Berlin"},
            "C-7310": {"name": "A. Roe", "email": "a.roe@example.com", "city": "Lyon"},
        }
    )

    def ticket(self, ticket_id: str) -> dict[str, Any]:
        found = self.tickets.get(ticket_id)
        if found is None:
            raise ToolError(f"No ticket {ticket_id!r}; the tracker has {', '.join(self.tickets)}.")
        return found


def build_tracker(tracker: Tracker | None = None) -> MCPServer:
    tracker = tracker or Tracker()
    server = MCPServer(NAME, instructions="The team's ticket tracker.", log_level="WARNING")

    @server.tool()
    def get_ticket(ticket_id: str) -> str:
        """Read a ticket: its title, status, customer id and comments."""
        tracker.calls.append(("get_ticket", {"ticket_id": ticket_id}))
        ticket = tracker.ticket(ticket_id)
        comments = "\n".join(f"- {c}" for c in ticket["comments"]) or "(none)"
        return (
            f"{ticket_id}: {ticket['title']} [{ticket['status']}], customer "
            f"{ticket['customer']}\nComments:\n{comments}"
        )

    @server.tool()
    def add_comment(ticket_id: str, text: str) -> str:
        """Add a comment to a ticket."""
        tracker.calls.append(("add_comment", {"ticket_id": ticket_id, "text": text}))
        tracker.ticket(ticket_id)["comments"].append(text)
        return f"Comment added to {ticket_id}."

    @server.tool()
    def customer_lookup(customer_id: str) -> str:
        """Look a customer up by id: name, e-mail and city (personal data)."""
        tracker.calls.append(("customer_lookup", {"customer_id": customer_id}))
        customer = tracker.customers.get(customer_id)
        if customer is None:
            raise ToolError(f"No customer {customer_id!r}.")
        return f"{customer_id}: {customer['name']}, {customer['email']}, {customer['city']}"

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--path", default="/mcp")
    args = parser.parse_args(argv)
    # Ctrl-C reaches it with the rest of `manage.py serve`: a stop, not an error.
    with contextlib.suppress(KeyboardInterrupt):
        build_tracker().run(
            "streamable-http", host=args.host, port=args.port, streamable_http_path=args.path
        )


if __name__ == "__main__":
    main()
