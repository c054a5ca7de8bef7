"""The home page, the navigation's live inbox count (polled where the inbox's own cards
are not on the page: there the count comes with them, see `inbox.cards`), sign-in and the
password reset."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.views import LoginView, LogoutView, PasswordResetView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agentruns import selectors
from agentruns.demo_accounts import demo_credentials
from playground.polls import poll, unchanged


@login_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "playground/home.html", {"demo_users": demo_credentials()})


@poll
def inbox_count(request: HttpRequest) -> HttpResponse:
    """The nav badge, polled by htmx with the count it shows: 204 while that holds."""
    count = selectors.inbox_count(request.user)
    if unchanged(request, str(count)):
        return HttpResponse(status=204)
    return render(request, "playground/_nav_count.html", {"count": count, "polls": True})


class SignIn(LoginView):
    """Django's login, for every user (UI-4), showing the demo accounts while they exist."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "demo_users": demo_credentials()}


class SignOut(LogoutView):
    """Django's logout; the sign-in page it leads to then says it happened."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        messages.success(request, "You are signed out.")
        return response


class SitePasswordResetForm(PasswordResetForm):
    """SEC-14: the mailed link is built on AGENTRUNS_SITE_URL, like every mailed link,
    never on the request's Host header (which a client chooses: a reset link pointing at
    the attacker's host would hand them the token)."""

    def save(self, *args: Any, **kwargs: Any) -> None:
        site = urlsplit(settings.AGENTRUNS_SITE_URL)
        kwargs.update(domain_override=site.netloc, use_https=site.scheme == "https")
        super().save(*args, **kwargs)


class PasswordReset(PasswordResetView):
    form_class = SitePasswordResetForm
