"""The home page and the navigation's live inbox count."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agentruns.demo_accounts import demo_credentials
from playground.context import inbox_count as count_for


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "playground/home.html", {"demo_users": demo_credentials()})


@login_required
def inbox_count(request: HttpRequest) -> HttpResponse:
    """The nav badge's text, polled by htmx."""
    return HttpResponse(str(count_for(request.user)), content_type="text/plain")


class SignIn(LoginView):
    """Django's login, for every user (UI-4), showing the demo accounts while they exist."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "demo_users": demo_credentials()}
