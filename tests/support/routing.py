"""Helpers for routing, reminders and escalation (HITL-14, HITL-15): groups, approvers
in and out of them, and a configuration whose tickets go to a group."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from agentruns.models import Configuration, Ticket
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import write_call

WRITE_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [write_call("Routed", call_id="call_w")]},
    {"text": "done"},
]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
ASK = {"id": "call_q", "name": "ask_user", "arguments": {"question": "n?", "schema": SCHEMA}}
ASK_TURNS: list[dict[str, Any]] = [{"tool_calls": [ASK]}, {"text": "thanks"}]


def person(username: str, *groups: Group, approves: bool = True) -> Any:
    """A user with an address, in `groups`, holding `approve_run` unless told otherwise."""
    user = get_user_model().objects.create_user(
        username, password="pw", email=f"{username}@example.com", is_staff=True
    )
    user.groups.add(*groups)
    return grant(user, "approve_run") if approves else user


def routed_configuration(
    slug: str, *groups: Group, turns: list[dict[str, Any]] | None = None, **kw: Any
) -> Configuration:
    configuration = scripted_configuration(slug, turns or WRITE_TURNS, **kw)
    configuration.approver_groups.set(groups)
    return configuration


def age(ticket: Ticket, *, passed: float) -> Ticket:
    """Move the ticket's opening back so that `passed` (0..1) of its time to the deadline
    has gone by now (the deadline keeps its distance from the opening)."""
    assert ticket.deadline is not None
    span = ticket.deadline - ticket.created_at
    opened = timezone.now() - span * passed
    Ticket.objects.filter(pk=ticket.pk).update(created_at=opened, deadline=opened + span)
    ticket.refresh_from_db()
    return ticket


def opened_ago(ticket: Ticket, seconds: float) -> Ticket:
    """Move the ticket's opening `seconds` back, keeping its deadline."""
    Ticket.objects.filter(pk=ticket.pk).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )
    ticket.refresh_from_db()
    return ticket
