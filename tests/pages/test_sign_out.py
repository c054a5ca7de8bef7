"""UI-4: Django's sign-out, and the sign-in page it leads to says it happened."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_ui4_signing_out_says_so_on_the_sign_in_page(client, member):
    client.force_login(member)

    response = client.post("/accounts/logout/", follow=True)

    assert response.redirect_chain[-1][0] == "/accounts/login/"
    page = response.content.decode()
    assert "You are signed out." in page and "<h1>Sign in</h1>" in page
    assert "_auth_user_id" not in client.session
