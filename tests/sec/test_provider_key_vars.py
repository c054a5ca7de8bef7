"""SEC-11: which environment variables a provider may name is the deployer's allow-list
(`AGENTRUNS_PROVIDER_KEY_VARS`, default `OPENAI_API_KEY,ANTHROPIC_API_KEY`), checked on
save (model validation, API, admin) and again whenever a provider is used, so staff
cannot make a worker send any other of its secrets to a server of their choice — not
even through a row written before the list was narrowed. SEC-5 stays a floor under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.core.exceptions import ValidationError

from agentruns.models import Provider, Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_openai_configuration
from tests.support.crash import PROJECT_ROOT
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

# Each passed the deny-list: a _KEY or _TOKEN name that is no Django setting.
WORKER_SECRETS = ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "STRIPE_API_KEY"]
STOLEN = "stolen-0123456789-abcdefghij"


def provider_body(name: str) -> dict:
    return {"slug": "p", "name": "P", "kind": "openai", "api_key_env": name}


@pytest.mark.parametrize("name", WORKER_SECRETS)
def test_sec11_the_api_refuses_a_variable_the_deployer_did_not_list(api, name):
    response = api.post("/api/providers/", provider_body(name), format="json")
    assert response.status_code == 400, response.content
    assert "AGENTRUNS_PROVIDER_KEY_VARS" in response.json()["fields"]["api_key_env"][0]
    assert not Provider.objects.filter(slug="p").exists()


@pytest.mark.parametrize("name", WORKER_SECRETS)
def test_sec11_model_validation_refuses_it(name):
    with pytest.raises(ValidationError) as caught:
        Provider(slug="p", name="P", kind="openai", api_key_env=name).full_clean()
    assert "api_key_env" in caught.value.message_dict


def test_sec11_the_admin_form_refuses_it(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    form = {
        **provider_body("AWS_SECRET_ACCESS_KEY"),
        "timeout_seconds": "60",
        "max_retries": "0",
        "tool_choice": "auto",
        "trust_zone": "",
        "base_url": "",
        "active": "on",
    }
    response = client.post("/admin/agentruns/provider/add/", form)
    assert response.status_code == 200  # the form again, with the error
    assert "AGENTRUNS_PROVIDER_KEY_VARS" in response.content.decode()
    assert not Provider.objects.filter(slug="p").exists()
    form["api_key_env"] = "OPENAI_API_KEY"
    assert client.post("/admin/agentruns/provider/add/", form).status_code == 302


def test_sec11_a_listed_variable_is_accepted_and_the_list_is_the_deployers(api, settings):
    settings.AGENTRUNS_PROVIDER_KEY_VARS = ["OPENAI_API_KEY", "GITHUB_TOKEN"]
    created = api.post("/api/providers/", provider_body("GITHUB_TOKEN"), format="json")
    assert created.status_code == 201, created.content
    assert Provider.objects.filter(slug="p", api_key_env="GITHUB_TOKEN").exists()
    response = api.post("/api/providers/", {**provider_body("HF_TOKEN"), "slug": "q"})
    assert response.status_code == 400


def test_sec5_the_list_cannot_name_a_server_secret_either(api, settings):
    settings.AGENTRUNS_PROVIDER_KEY_VARS = ["SECRET_KEY", "DATABASE_URL"]
    for name in settings.AGENTRUNS_PROVIDER_KEY_VARS:
        assert api.post("/api/providers/", provider_body(name), format="json").status_code == 400


def test_sec11_the_default_list_is_openai_and_anthropic():
    env = {k: v for k, v in os.environ.items() if k != "AGENTRUNS_PROVIDER_KEY_VARS"}
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, json; django.setup(); from django.conf import settings; "
            "print(json.dumps(settings.AGENTRUNS_PROVIDER_KEY_VARS))",
        ],
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(shown.stdout) == ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"]


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"])
def test_sec11_a_row_written_earlier_never_sends_an_unlisted_variable(staff, monkeypatch, name):
    """The issue's attack: a provider of staff's own `base_url` naming a worker secret,
    written before the rule (or around it). The run fails `provider_key_refused`; the
    server sees no request, so no bearer token; the value is in no failure."""
    monkeypatch.setenv(name, STOLEN)
    with FakeProvider(default={"text": "thanks for the key"}) as attacker:
        configuration = make_openai_configuration("exfil", attacker)
        Provider.objects.filter(pk=configuration.provider_id).update(api_key_env=name)
        run = submit(staff, "exfil", "hello")

        assert execute_run(run.pk) == Run.Status.FAILED

        assert attacker.requests == []
    run.refresh_from_db()
    assert run.failure["code"] == "provider_key_refused"
    assert "AGENTRUNS_PROVIDER_KEY_VARS" in run.failure["detail"]
    assert STOLEN not in json.dumps(run.failure)
