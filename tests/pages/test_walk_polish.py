"""UI-4, UI-7, UI-1: what a new user's walk of `make run` tripped on. Django's account
pages carry the product's name; the admin's tables fit a laptop's width; its times use the
site's one format; every event of a run's timeline is a sentence; the Replays page
preselects a configuration that works offline."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model

from agentruns import events as ev
from agentruns.demo import load_demo_data, load_demo_schedules, load_demo_users
from agentruns.models import Event, Run, Schedule, Trigger, TriggerFiring
from agentruns.runtime.loop import execute_run
from agentruns.services.fork import ForkRequest, run_fork
from agentruns.words import when
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path", ["/accounts/password_reset/", "/accounts/password_reset/done/", "/accounts/reset/done/"]
)
def test_ui4_the_password_reset_pages_carry_the_admins_name(client, path):
    page = client.get(path).content.decode()
    assert "Django" not in page
    assert f">{admin.site.site_header}</a>" in page
    assert f"| {admin.site.site_title}</title>" in page


@pytest.fixture
def demo():
    load_demo_data()
    load_demo_users()
    load_demo_schedules()
    return get_user_model().objects.get(username="admin")


def test_ui7_a_triggers_last_runs_say_their_time_in_the_sites_format(client, demo):
    trigger = Trigger.objects.get(slug="demo-alert")
    firing = TriggerFiring.objects.create(
        trigger=trigger, signature="0" * 64, signed_at=trigger.created_at
    )
    client.force_login(demo)
    page = client.get(f"/admin/agentruns/trigger/{trigger.pk}/change/").content.decode()
    assert when(firing.created_at) in page and when(firing.created_at).endswith("UTC")
    assert str(firing.created_at) not in page


@pytest.mark.parametrize("model", [Schedule, Trigger])
def test_ui1_the_demos_schedule_and_trigger_say_who_created_them(demo, model):
    assert {row.created_by for row in model.objects.all()} == {demo}


def test_ui1_a_forks_first_event_is_a_sentence(client, demo):
    run = submit(demo, "multi-tool-demo", "Write the standup note")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    fork = run_fork(user=demo, run_id=run.pk, request=ForkRequest(input="Now write it shorter"))
    opening = Event.objects.filter(run=fork).order_by("sequence").first()
    assert opening.type == ev.RUN_FORKED
    said = ev.summary(opening.type, opening.payload)
    at = opening.payload["forked_from"]["at"]
    assert said.startswith(f"forked from run #{run.pk} at event #{at} on multi-tool-demo")
    client.force_login(demo)
    assert said in client.get(f"/runs/{fork.pk}/").content.decode()


def test_ui7_the_replays_page_preselects_a_configuration_that_works_offline(client, demo, settings):
    client.force_login(demo)
    page = client.get("/replays/").content.decode()
    assert f'<option value="{settings.AGENTRUNS_DEFAULT_CONFIGURATION}" selected>' in page
    # The admin's "Replay on this configuration" still names its own.
    chosen = client.get("/replays/?configuration=helpdesk").content.decode()
    assert '<option value="helpdesk" selected>' in chosen
