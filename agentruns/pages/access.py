"""Who may open which page; the rules themselves live in selectors and services."""

from __future__ import annotations

from typing import Any


def may_use_playground(user: Any) -> bool:
    """FS-5: staff holding `agentruns.use_playground`."""
    return bool(
        user.is_authenticated and user.is_staff and user.has_perm("agentruns.use_playground")
    )
