"""The demo's sign-in accounts: `manage.py demo_data` creates them once, and the sign-in
and home pages show them while their password is still the demo's."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password

DEMO_PASSWORD = "agentruns-demo"
# (username, what they may do, is_superuser): an admin who may do everything, a plain
# initiator who signs in to see their own runs and answer their own questions, and an
# editor of the catalog whose widening changes wait for the admin's approval (GOV-3).
DEMO_USERS = [
    ("admin", "staff and superuser: playground, approvals, every run, the admin", True),
    ("member", "a plain user: starts runs, sees only their own, answers their questions", False),
    ("editor", "staff who edit the catalog; a change that widens waits for approval", False),
]
# The editor's permissions: change the catalog, never approve a change of it.
EDITOR_PERMISSIONS = [
    f"{action}_{model}"
    for model in ("provider", "configuration", "snippet", "skill", "mcpserver", "mcptool")
    for action in ("view", "change")
] + ["view_changerequest", "view_configurationsnippet", "view_configurationskill"]


def demo_credentials() -> list[dict[str, str]]:
    """The demo users who still have the demo password, for the sign-in and home pages."""
    rows = []
    for user in get_user_model().objects.filter(username__in=[u for u, _, _ in DEMO_USERS]):
        if _has_demo_password(user.password):
            role = next(r for u, r, _ in DEMO_USERS if u == user.get_username())
            rows.append({"username": user.get_username(), "password": DEMO_PASSWORD, "role": role})
    return sorted(rows, key=lambda row: row["username"])


_checked_hashes: dict[str, bool] = {}


def _has_demo_password(encoded: str) -> bool:
    # Hashing is deliberately slow; a given stored hash always gives the same answer.
    if encoded not in _checked_hashes:
        _checked_hashes[encoded] = check_password(DEMO_PASSWORD, encoded)
    return _checked_hashes[encoded]
