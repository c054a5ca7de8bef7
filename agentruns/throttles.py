"""SEC-14: how often one person may start runs and act on them, on every door.

The API's submission and resume, the pages' Start and Run, the inbox's decisions and
answers and the admin's decide, cancel and run-with-forced-sources all count against the
same per-user scope, in one counter per user and scope, kept in Django's default cache:
the database cache or Redis (settings `CACHES`), which every web process shares. A counter
in process memory would let each gunicorn worker grant the whole rate again.

The sliding window is DRF's (`SimpleRateThrottle`: a list of request times per key); the
rates are REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], read on each request.
"""

from __future__ import annotations

import math
from typing import Any

from rest_framework.settings import api_settings
from rest_framework.throttling import ScopedRateThrottle, SimpleRateThrottle

from agentruns.errors import Throttled

SUBMIT = "submit"  # starting a run (API create, /runs/start/, the playground, the admin)
RESUME = "resume"  # answering or deciding a ticket, cancelling a run


class ScopeThrottle(ScopedRateThrottle):
    """One scope's rate for the request's user (or, signed out, its address), keyed as DRF
    keys scoped throttles, so the API and the pages share each counter."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(scope)
        self.rate = str(rate) if rate else None
        if self.rate:
            self.num_requests, self.duration = self.parse_rate(self.rate)

    def allow_request(self, request: Any, view: Any = None) -> bool:
        # ScopedRateThrottle.allow_request would read the scope from a DRF view.
        return SimpleRateThrottle.allow_request(self, request, view)


def throttle_check(request: Any, scope: str) -> None:
    """Count one `scope` action of the request's user; over the rate, raise `Throttled`
    (counted nothing) with the seconds until the next is allowed."""
    limit = ScopeThrottle(scope)
    if limit.allow_request(request):
        return
    wait = math.ceil(limit.wait() or 1)
    raise Throttled(f"Try again in {wait} seconds.", retry_after=wait)


class OwnerThrottle(ScopeThrottle):
    """A scope's rate counted for a given person rather than the request's: a trigger's
    runs count against its owner's submissions (SCHED-4), in the same counter."""

    def __init__(self, scope: str, owner_id: int) -> None:
        super().__init__(scope)
        self.owner_id = owner_id

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.owner_id}


def throttle_check_owner(request: Any, scope: str, owner_id: int) -> None:
    limit = OwnerThrottle(scope, owner_id)
    if limit.allow_request(request):
        return
    wait = math.ceil(limit.wait() or 1)
    raise Throttled(f"Try again in {wait} seconds.", retry_after=wait)
