"""UI-5: a post without a valid CSRF token (a forged post, or a page open so long its
session changed) decides nothing; the refusal is a styled page that says so."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme

from agentruns.words import WORDS


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    back = request.POST.get("next", "") if request.method == "POST" else ""
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = ""
    context = {"words": WORDS["csrf_failed"], "back": back}
    return render(request, "playground/csrf_failure.html", context, status=403)
