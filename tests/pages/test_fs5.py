"""FS-5: forcing sources and dry runs belong to the playground — staff with
`agentruns.use_playground` — over every door (service, API, pages)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentruns.errors import NotPermitted
from agentruns.models import Run
from agentruns.services.runs import Submission, run_dry, run_submit
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_skill, make_snippet

pytestmark = pytest.mark.django_db


@pytest.fixture
def snippet():
    make_configuration("cfg")
    return make_snippet("secret-plans", "secret", text="Project Falcon closes in Q1.")


@pytest.fixture
def plain_staff(django_user_model):
    return django_user_model.objects.create_user("plain-staff", password="pw", is_staff=True)


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize(
    "body",
    [
        {"forced_snippets": "SNIPPET"},
        {"forced_skills": "SKILL"},
        {"dry_run": True},
    ],
    ids=["forced-snippet", "forced-skill", "dry-run"],
)
@pytest.mark.parametrize("who", ["member", "plain_staff"])
def test_fs5_forcing_or_dry_running_over_the_api_needs_the_playground(request, snippet, body, who):
    skill = make_skill("extra")
    ids = {"SNIPPET": [snippet.pk], "SKILL": [skill.pk]}
    payload = {"configuration": "cfg", "input": "go"}
    payload.update({k: ids.get(v, v) if isinstance(v, str) else v for k, v in body.items()})
    response = api_as(request.getfixturevalue(who)).post("/api/runs/", payload, format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "not_permitted"
    assert "Project Falcon" not in response.content.decode()
    assert not Run.objects.exists()


def test_fs5_a_plain_run_needs_no_playground(member, snippet):
    response = api_as(member).post(
        "/api/runs/", {"configuration": "cfg", "input": "go"}, format="json"
    )
    assert response.status_code == 201


def test_fs5_the_permission_without_staff_is_not_enough(member, snippet):
    grant(member, "use_playground")
    with pytest.raises(NotPermitted):
        run_dry(user=member, submission=Submission("cfg", "go"))


def test_fs5_staff_with_the_playground_permission_may_force_and_dry_run(plain_staff, snippet):
    grant(plain_staff, "use_playground")
    dry = api_as(plain_staff).post(
        "/api/runs/",
        {"configuration": "cfg", "input": "go", "dry_run": True, "forced_snippets": [snippet.pk]},
        format="json",
    )
    assert dry.status_code == 200 and dry.json()["dry_run"] is True
    run, created = run_submit(
        user=plain_staff, submission=Submission("cfg", "go", forced_snippets=(snippet.pk,))
    )
    assert created and run.forced_snippet_ids == [snippet.pk]


def test_fs5_the_service_refuses_before_anything_is_stored(plain_staff, snippet):
    with pytest.raises(NotPermitted):
        run_submit(
            user=plain_staff, submission=Submission("cfg", "go", forced_snippets=(snippet.pk,))
        )
    assert not Run.objects.exists()
