"""UI-7: a server error is a page of the site (its stylesheet, a way home), not Django's bare
"Server Error (500)"; it renders from Django's empty context with no database access."""

from __future__ import annotations

import pytest
from django.templatetags.static import static
from django.urls import path


def boom(request):
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", boom)]


@pytest.mark.urls(__name__)
@pytest.mark.django_db
def test_ui7_a_server_error_shows_the_sites_500_page(client, settings, django_assert_num_queries):
    settings.DEBUG = False
    client.raise_request_exception = False

    with django_assert_num_queries(0):
        response = client.get("/boom/")

    body = response.content.decode()
    assert response.status_code == 500
    assert "<h1>Server error</h1>" in body
    assert 'href="/">Back to the home page</a>' in body
    assert f'href="/{static("playground/app.css").lstrip("/")}"' in body
    assert "a bug" not in body
