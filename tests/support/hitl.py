"""Helpers for the HITL tests (§7, §8): parking a run, copying a ticket's identity into a
resume body the way a host does (HITL-3), and a before/after picture of everything a
resume command could change (HITL-4: a rejected command changes nothing)."""

from __future__ import annotations

from typing import Any

from django_q.models import OrmQ
from rest_framework.response import Response
from rest_framework.test import APIClient

from agentruns.models import Event, Note, Run, Ticket, ToolInvocation


def write_call(title: str, body: str = "body", call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "notes.write", "arguments": {"title": title, "body": body}}
    if call_id:
        call["id"] = call_id
    return call


def active_ticket(run_id: int) -> Ticket:
    return Ticket.objects.get(run_id=run_id, status=Ticket.Status.ACTIVE)


def identity(ticket: Ticket) -> dict[str, Any]:
    """The ticket's identity fields exactly as the API shows them."""
    return ticket.identity.as_dict()


def allow(ticket: Ticket, note: str = "", **override: Any) -> dict[str, Any]:
    result = {"kind": "permission", "decision": "allow", "note": note}
    return {**identity(ticket), "result": result, **override}


def deny(ticket: Ticket, note: str = "", **override: Any) -> dict[str, Any]:
    result = {"kind": "permission", "decision": "deny", "note": note}
    return {**identity(ticket), "result": result, **override}


def answer(ticket: Ticket, value: Any, **override: Any) -> dict[str, Any]:
    return {**identity(ticket), "result": {"kind": "input", "value": value}, **override}


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def resume(client: APIClient, run_id: int, body: Any, **kw: Any) -> Response:
    if "content_type" not in kw:
        kw.setdefault("format", "json")
    return client.post(f"/api/runs/{run_id}/resume/", body, **kw)


def picture(*run_ids: int) -> dict[str, Any]:
    """Everything a resume command may change, for comparing before and after."""
    runs = {
        row["id"]: row
        for row in Run.objects.filter(pk__in=run_ids).values(
            "id",
            "status",
            "lease_owner",
            "lease_expires_at",
            "updated_at",
            "epoch",
            "failure",
            "final_reply",
            "wake_queue_id",
        )
    }
    return {
        "runs": runs,
        "tickets": list(
            Ticket.objects.filter(run_id__in=run_ids)
            .order_by("id")
            .values_list("id", "status", "resolved_at", "resolved_by", "resolution")
        ),
        "events": list(
            Event.objects.filter(run_id__in=run_ids)
            .order_by("thread_id", "sequence")
            .values_list("thread_id", "sequence", "type")
        ),
        "invocations": list(
            ToolInvocation.objects.filter(run_id__in=run_ids)
            .order_by("id")
            .values_list("call_id", "status", "effect_sent_at", "result")
        ),
        "notes": Note.objects.count(),
        "wake_ups": OrmQ.objects.count(),
    }


def run_events(run_id: int) -> list[Event]:
    return list(Event.objects.filter(run_id=run_id).order_by("sequence"))


def results_by_call(run_id: int) -> dict[str, dict[str, Any]]:
    return {
        event.payload["call_id"]: event.payload
        for event in run_events(run_id)
        if event.type == "tool.result"
    }


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m.get("role") == "tool"]
