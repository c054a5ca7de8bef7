"""UI-7: the runs page's *Start a run* follows the playground's one rule: the selected
configuration's own example task (a fresh page: the preselected one's), and a change of
configuration brings the new one's unless the user typed their own. FS-5: anyone signed in
may start a plain run, so the form stays in view once they have runs."""

from __future__ import annotations

import re
from html import unescape

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Configuration
from agentruns.services.runs import Submission, run_submit

pytestmark = pytest.mark.django_db

OWN = "Check the backups"


@pytest.fixture(autouse=True)
def signed_in(client, member, settings):
    load_demo_data()
    settings.AGENTRUNS_DEFAULT_CONFIGURATION = "helpdesk"
    client.force_login(member)
    return member


def example(slug: str) -> str:
    return Configuration.objects.get(slug=slug).example_task


def start_task(page: str) -> str | None:
    found = re.search(r'<textarea name="task" id="id_start_task"[^>]*>([^<]*)</textarea>', page)
    return unescape(found.group(1)) if found else None


def test_ui7_start_a_run_opens_with_the_preselected_configurations_example(client):
    page = client.get("/runs/").content.decode()
    assert 'value="helpdesk" selected' in page
    assert start_task(page) == example("helpdesk")


def test_ui7_a_change_of_configuration_brings_its_example_unless_the_user_typed_their_own(
    client,
):
    def switched(task: str) -> str | None:
        posted = {"configuration": "approval-demo", "task": task}
        answer = client.post("/runs/start/task/", posted, headers={"HX-Request": "true"})
        assert answer.status_code == 200
        return start_task(answer.content.decode())

    assert switched(example("helpdesk")) == example("approval-demo")
    assert switched(OWN) == OWN


def test_ui7_the_select_asks_for_its_example_as_it_changes(client):
    page = client.get("/runs/").content.decode()
    select = re.search(r'<select name="configuration" id="id_start_configuration"[^>]*>', page)
    assert select and 'hx-post="/runs/start/task/"' in select.group(0)
    assert 'hx-target="#id_start_task"' in select.group(0)


def test_fs5_a_member_with_runs_still_sees_start_a_run_unfolded(client, signed_in):
    run_submit(user=signed_in, submission=Submission("helpdesk", "Reset my password"))
    page = client.get("/runs/").content.decode()
    start = page.index('id="start-title"')
    assert "<details" not in page[:start]
    assert 'action="/runs/start/"' in page[start:]
