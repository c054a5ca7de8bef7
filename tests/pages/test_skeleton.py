"""UI-4: every page sends anonymous visitors to Django's sign-in, which serves every user;
the navigation counts the tickets the viewer may act on (HITL-9)."""

from __future__ import annotations

import pytest

from agentruns.demo import load_demo_data, load_demo_users
from agentruns.demo_accounts import DEMO_PASSWORD
from agentruns.policy import answerable_tickets
from tests.conftest import grant
from tests.support.runs import park

pytestmark = pytest.mark.django_db

PAGES = ["/", "/runs/", "/inbox/", "/playground/"]


@pytest.mark.parametrize("path", PAGES)
def test_ui4_anonymous_visitors_are_sent_to_sign_in(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={path}"


def test_ui4_a_plain_user_signs_in_on_the_styled_page(client, member):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert b"/static/playground/app.css" in page.content
    response = client.post("/accounts/login/", {"username": "member", "password": "pw"})
    assert response.status_code == 302 and response["Location"] == "/"
    home = client.get("/")
    assert home.status_code == 200
    assert b"Sign out" in home.content and b"member" in home.content
    # Sign-out is a POST form (Django 5 refuses GET logouts).
    assert b'action="/accounts/logout/"' in home.content


def test_ui4_sign_out_is_a_post(client, member):
    client.force_login(member)
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_the_sign_in_page_shows_the_demo_accounts_while_their_password_is_unchanged(client):
    load_demo_data()
    load_demo_users()
    page = client.get("/accounts/login/").content.decode()
    assert "admin" in page and "member" in page and DEMO_PASSWORD in page
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    admin.set_password("changed")
    admin.save()
    page = client.get("/accounts/login/").content.decode()
    assert "<code>admin</code>" not in page and "<code>member</code>" in page


def test_navigation_shows_playground_and_admin_only_to_staff_with_the_permission(
    client, staff, member
):
    client.force_login(member)
    page = client.get("/").content.decode()
    assert 'href="/playground/"' not in page and 'href="/admin/"' not in page
    assert 'href="/runs/"' in page and 'href="/inbox/"' in page
    grant(staff, "use_playground")
    client.force_login(staff)
    page = client.get("/").content.decode()
    assert 'href="/playground/"' in page and 'href="/admin/"' in page


def test_hitl9_inbox_count_is_what_the_viewer_may_act_on(client, staff, member):
    load_demo_data()
    park(member, "approval-demo")  # a tool permission: approvers only
    park(member, "question-demo")  # a question: its initiator too
    grant(staff, "approve_run")
    assert answerable_tickets(member).count() == 1
    assert answerable_tickets(staff).count() == 2
    client.force_login(member)
    assert b'id="nav-inbox-count"' in client.get("/inbox/count/").content
    assert client.get("/inbox/count/").content.endswith(b">1</span>\n")
    client.force_login(staff)
    assert client.get("/inbox/count/").content.endswith(b">2</span>\n")
    page = client.get("/").content.decode()
    assert 'id="nav-inbox-count"' in page and 'hx-trigger="every 5s"' in page
