"""What every page's navigation needs, computed only when a template asks for it."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.http import HttpRequest

from agentruns.policy import may_use_playground
from agentruns.selectors import inbox_count


def navigation(request: HttpRequest) -> dict[str, Any]:
    # Callables: the admin's pages get this context too and never pay for the queries.
    user = request.user
    return {
        "nav_inbox_count": partial(inbox_count, user),
        "nav_playground": partial(may_use_playground, user),
    }
