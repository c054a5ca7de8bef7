"""SEC-15: one authority for the catalog. The API asks for the Django model permissions the
admin asks for (`add_`, `change_`, `delete_`, and `view_` to read), on top of `is_staff`
as the admin's door does; `is_staff` alone grants nothing here the admin would refuse."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import DjangoModelPermissions
from rest_framework.request import Request

VIEW = ["%(app_label)s.view_%(model_name)s"]


class ModelPermission(DjangoModelPermissions):
    """DRF's model permissions with reads needing `view_` (DRF lets any reader in). A view
    names what its extra actions need in `action_permissions` (action -> permissions),
    since an action's HTTP method says nothing of it: a POST `refresh` changes a server,
    it adds none."""

    # OPTIONS describes the fields: a read like any other.
    perms_map = {**DjangoModelPermissions.perms_map, "GET": VIEW, "HEAD": VIEW, "OPTIONS": VIEW}

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated and user.is_staff):
            return False
        needed = getattr(view, "action_permissions", {}).get(getattr(view, "action", None))
        if needed is None:
            return super().has_permission(request, view)
        return bool(user.has_perms(needed))
