"""UI-4, UI-7, UI-1: what a new user's walk of `make run` tripped on. Django's account
pages carry the product's name; the admin's tables fit a laptop's width; its times use the
site's one format; every event of a run's timeline is a sentence; the Replays page
preselects a configuration that works offline."""

from __future__ import annotations

import pytest
from django.contrib import admin

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path", ["/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/done/"]
)
def test_ui4_the_password_reset_pages_carry_the_admins_name(client, path):
    page = client.get(path).content.decode()
    assert "Django" not in page
    assert f">{admin.site.site_header}</a>" in page
    assert f"| {admin.site.site_title}</title>" in page
