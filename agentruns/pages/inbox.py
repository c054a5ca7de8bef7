"""The approval inbox (HITL-9). Placeholder until the inbox lands (issue 12, branch pages-b)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agentruns.selectors import actionable_tickets


@login_required
def inbox(request: HttpRequest) -> HttpResponse:
    return render(request, "pages/inbox.html", {"tickets": actionable_tickets(request.user)})


@login_required
def card(request: HttpRequest, correlation_id: str) -> HttpResponse:
    ticket = actionable_tickets(request.user).filter(correlation_id=correlation_id)
    return render(request, "pages/inbox.html", {"tickets": ticket})
