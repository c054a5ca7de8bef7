"""GOV-1, SEC-3: the admin's history page of a versioned record answers an id that names no
row ("x", or a missing number) as Django's own history page does for a run: the admin's
"doesn't exist" redirect, never a 500."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

GOVERNED = ["configuration", "provider", "snippet", "skill", "mcpserver", "webhook"]


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    return client


@pytest.mark.parametrize("model", GOVERNED)
@pytest.mark.parametrize("object_id", ["x", "999999"])
def test_gov1_a_history_page_for_no_row_answers_as_djangos_own_does(admin_client, model, object_id):
    own = admin_client.get(f"/admin/agentruns/run/{object_id}/history/")
    governed = admin_client.get(f"/admin/agentruns/{model}/{object_id}/history/")

    assert own.status_code == 302 and own["Location"] == "/admin/"
    assert governed.status_code == own.status_code
    assert governed["Location"] == own["Location"]
    followed = admin_client.get(governed["Location"]).content.decode()
    assert "doesn\u2019t exist" in followed
