"""SCHED-5: the admin lists schedules and triggers with their next firing, last runs and
skips; a run started by either says so on its pages."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.test import Client

from agentruns.models import Run, Schedule, Trigger
from agentruns.services.schedules import schedule_fire
from agentruns.services.triggers import sign, trigger_fire
from tests.support.catalog import scripted_configuration

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def test_sched5_the_schedule_admin_shows_next_firing_last_runs_and_skips(admin, member):
    configuration = scripted_configuration("reports", [{"text": "ok"}])
    schedule = Schedule.objects.create(
        name="nightly", configuration=configuration, input="go", owner=member, cron="0 2 * * *"
    )
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=datetime(2020, 1, 1, 2, tzinfo=UTC))
    member.is_active = False
    member.save()
    schedule_fire(schedule_id=schedule.pk)  # long missed: recorded as a skip
    listing = admin.get("/admin/agentruns/schedule/").content.decode()
    assert "nightly" in listing and "0 2 * * * (UTC)" in listing
    page = admin.get(f"/admin/agentruns/schedule/{schedule.pk}/change/").content.decode()
    assert "missed" in page and "No run yet." in page
    schedule.refresh_from_db()
    assert schedule.next_run_at.strftime("%H:%M") == "02:00"


def test_sched5_a_triggered_run_says_so_in_the_admin_and_on_its_page(admin, member):
    configuration = scripted_configuration("alerts", [{"text": "ok"}])
    Trigger.objects.create(slug="pager", configuration=configuration, owner=member, secret="s" * 20)
    stamp = str(int(time.time()))
    fired = trigger_fire(
        slug="pager", timestamp=stamp, signature=sign("s" * 20, stamp, b"{}"), body=b"{}"
    )
    run: Run = fired.run
    said = "Started by trigger “pager” for member"
    assert said in admin.get(f"/admin/agentruns/run/{run.pk}/change/").content.decode()
    owner = Client()
    owner.force_login(member)
    assert said in owner.get(f"/runs/{run.pk}/").content.decode()
    html = admin.get(
        f"/admin/agentruns/trigger/{Trigger.objects.get().pk}/change/"
    ).content.decode()
    assert f"run #{run.pk}" in html and "s" * 20 not in html
