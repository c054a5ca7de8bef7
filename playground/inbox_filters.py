"""The inbox for a team (HITL-15): filters by configuration, by kind and to "mine" (runs I
started), kept in the URL as GET parameters so a filtered inbox can be bookmarked, shared,
reloaded and polled, and works without JavaScript; a count beside each choice.

A value that names nothing (an unknown kind, a configuration the viewer has no ticket of,
anything hostile) is dropped, never an error: the inbox then shows what is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest

from agentruns.models import Ticket

KINDS = {"approval": Ticket.Kind.TOOL_PERMISSION, "question": Ticket.Kind.REMOTE_INPUT}
KIND_LABELS = {"approval": "Approvals", "question": "Questions"}


@dataclass(frozen=True)
class InboxFilter:
    configuration: str = ""  # a slug
    kind: str = ""  # a key of KINDS
    mine: bool = False

    @property
    def active(self) -> bool:
        return bool(self.configuration or self.kind or self.mine)

    def query(self) -> str:
        """The filter as a query string ("" when none), for links, redirects and polls."""
        pairs = [("configuration", self.configuration), ("kind", self.kind)]
        pairs.append(("mine", "1" if self.mine else ""))
        return urlencode([(key, value) for key, value in pairs if value])


def inbox_filter(request: HttpRequest) -> InboxFilter:
    get = request.GET
    kind = get.get("kind", "")
    return InboxFilter(
        configuration=get.get("configuration", "")[:50],
        kind=kind if kind in KINDS else "",
        mine=get.get("mine") == "1",
    )


def _narrowed(
    tickets: QuerySet[Ticket], chosen: InboxFilter, user: Any, *, skip: str = ""
) -> QuerySet[Ticket]:
    """`tickets` under every chosen filter but `skip` (a facet counts over the others)."""
    if chosen.configuration and skip != "configuration":
        tickets = tickets.filter(run__configuration__slug=chosen.configuration)
    if chosen.kind and skip != "kind":
        tickets = tickets.filter(kind=KINDS[chosen.kind])
    if chosen.mine and skip != "mine":
        tickets = tickets.filter(run__created_by=user)
    return tickets


def filtered(tickets: QuerySet[Ticket], chosen: InboxFilter, user: Any) -> QuerySet[Ticket]:
    return _narrowed(tickets, chosen, user)


def filter_choices(tickets: QuerySet[Ticket], chosen: InboxFilter, user: Any) -> dict[str, Any]:
    """Each choice with how many tickets it would show, given the other chosen filters."""
    by_configuration = (
        _narrowed(tickets, chosen, user, skip="configuration")
        .order_by()
        .values("run__configuration__slug", "run__configuration__name")
        .annotate(n=Count("pk"))
        .order_by("run__configuration__slug")
    )
    kinds = _narrowed(tickets, chosen, user, skip="kind").aggregate(
        **{key: Count("pk", filter=Q(kind=value)) for key, value in KINDS.items()}
    )
    mine = _narrowed(tickets, chosen, user, skip="mine").filter(run__created_by=user).count()
    configurations = [
        {
            "slug": row["run__configuration__slug"],
            "name": row["run__configuration__name"],
            "count": row["n"],
        }
        for row in by_configuration
    ]
    if chosen.configuration and chosen.configuration not in {c["slug"] for c in configurations}:
        # Chosen, and nothing of it left: still shown as chosen, with its zero.
        configurations.append({"slug": chosen.configuration, "name": "", "count": 0})
    return {
        "configurations": configurations,
        "kinds": [{"key": key, "label": KIND_LABELS[key], "count": kinds[key]} for key in KINDS],
        "mine_count": mine,
    }
