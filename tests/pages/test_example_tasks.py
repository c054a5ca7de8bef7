"""UI-7: each configuration may name an example task; the playground fills in the chosen
configuration's, and a change of configuration brings the new one's, unless the user typed
their own. Without JavaScript ("Update readout" posts the form) and as htmx asks for the
readout (a POST: the task is no URL's business)."""

from __future__ import annotations

import re
from html import unescape

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Configuration
from agentruns.selectors import EXAMPLE_TASK

pytestmark = pytest.mark.django_db

OWN = "Check the backups"


@pytest.fixture(autouse=True)
def operator(client, staff):
    load_demo_data()
    client.force_login(staff)
    return staff


def example(slug: str) -> str:
    return Configuration.objects.get(slug=slug).example_task


def task_box(page: str) -> str | None:
    found = re.search(r'<textarea name="task" id="id_task"[^>]*>([^<]*)</textarea>', page)
    return unescape(found.group(1)) if found else None


def test_ui7_the_demos_configurations_each_name_their_own_example_task():
    tasks = [example(slug) for slug in ("helpdesk", "approval-demo", "delegate-demo", "mcp-demo")]
    assert all(tasks) and EXAMPLE_TASK not in tasks and len(set(tasks)) == len(tasks)


def test_ui7_the_playground_opens_with_the_chosen_configurations_example(client):
    assert task_box(client.get("/playground/").content.decode()) == EXAMPLE_TASK
    page = client.get("/playground/?configuration=approval-demo").content.decode()
    assert task_box(page) == example("approval-demo")


def test_ui7_another_configurations_example_gives_way_without_javascript(client):
    posted = {"configuration": "helpdesk", "task": EXAMPLE_TASK, "action": "readout"}
    assert task_box(client.post("/playground/", posted).content.decode()) == example("helpdesk")
    posted["task"] = OWN
    assert task_box(client.post("/playground/", posted).content.decode()) == OWN


def test_ui7_htmx_swaps_in_the_new_example_and_leaves_a_typed_task_alone(client):
    def readout(task: str) -> str:
        posted = {"configuration": "mcp-demo", "task": task}
        return client.post(
            "/playground/readout/", posted, headers={"HX-Request": "true"}
        ).content.decode()

    swapped = readout(example("approval-demo"))
    assert 'hx-swap-oob="true">' + example("mcp-demo") in swapped
    assert 'id="id_task"' not in readout(OWN)
    assert 'id="id_task"' not in readout(example("mcp-demo"))


def test_ui7_a_dry_run_keeps_the_task_it_ran(client):
    posted = {"configuration": "helpdesk", "task": EXAMPLE_TASK, "action": "dry"}
    assert task_box(client.post("/playground/", posted).content.decode()) == EXAMPLE_TASK
