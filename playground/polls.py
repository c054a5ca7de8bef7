"""What the pages poll (UI-2, UI-7). Every live part of a page is fetched by htmx from an
endpoint of its own, marked here with `@poll`; a list poll carries the signature of what
the page shows and is answered 204 while it still holds, so nothing is swapped (or sent)
when nothing changed. The console stays quiet: `QuietPolls` drops the request log's line
for a poll that went well, and the server's line for an error Django has reported itself.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django_htmx.http import HttpResponseClientRedirect

SIGNATURE = "signature"


def poll(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`login_required` for a polled fragment: a poll whose session has ended sends the
    whole page to sign-in, rather than the sign-in form being swapped into the page."""
    required = login_required(view)

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if getattr(request, "htmx", False) and not request.user.is_authenticated:
            return HttpResponseClientRedirect(settings.LOGIN_URL)
        return required(request, *args, **kwargs)

    wrapper.polled = True  # type: ignore[attr-defined]
    return wrapper


def signature(parts: Iterable[object]) -> str:
    """A short digest of what a polled part shows (ids, statuses, counts)."""
    return hashlib.sha256(",".join(str(p) for p in parts).encode()).hexdigest()[:16]


def unchanged(request: HttpRequest, shown: str) -> bool:
    """The poll says the page already shows `shown`: answer 204, swap nothing."""
    return request.GET.get(SIGNATURE) == shown


def is_poll(path: str) -> bool:
    try:
        return getattr(resolve(urlsplit(path).path).func, "polled", False)
    except Resolver404:
        return False


class QuietPolls(logging.Filter):
    """For `django.server` (runserver's request log): a poll answered below 400 logs
    nothing, and neither does any answer of 400 or more, which Django has already logged
    once on `django.request` (one line for a 4xx: see `OneLine4xx`). Other requests keep
    their line, and so does whatever the server says that is not a request line."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) < 2 or not str(args[1]).isdigit():
            return True
        status = int(str(args[1]))
        if status >= 400:
            return False
        request_line = str(args[0]).split()
        return not (len(request_line) >= 2 and is_poll(request_line[1]))


class OneLine4xx(logging.Filter):
    """`django.request`: an ordinary 403 or 404 is one line, never a traceback (the
    exception is the expected answer); a 5xx keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True
