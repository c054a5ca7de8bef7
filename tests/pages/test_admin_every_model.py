"""UI-1: every model has an admin page an operator can open, and the run page shows the
timeline and the readout."""

import pytest
from django.apps import apps
from django.contrib import admin

from agentruns.demo import load_demo_data
from agentruns.models import Run
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, django_user_model):
    user = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(user)
    return user


def test_ui1_every_agentruns_model_has_an_admin_changelist(client, operator):
    load_demo_data()
    through = {"configurationsnippet", "configurationskill", "configurationfallback"}
    models = [
        m
        for m in apps.get_app_config("agentruns").get_models()
        if m._meta.model_name not in through
    ]
    assert set(models) <= set(admin.site._registry)  # edited inline on the configuration
    for model in models:
        url = f"/admin/agentruns/{model._meta.model_name}/"
        assert client.get(url).status_code == 200, url


def test_ui1_run_page_shows_its_timeline_and_readout(client, operator):
    load_demo_data()
    run, _ = run_submit(user=operator, submission=Submission("multi-tool-demo", "go"))
    assert execute_run(run.pk) == Run.Status.COMPLETED
    page = client.get(f"/admin/agentruns/run/{run.pk}/change/").content.decode()
    for shown in ("message.user", "message.assistant", "tool.result", "run.completed"):
        assert shown in page
    assert "Context readout" in page and "style-guide" in page
