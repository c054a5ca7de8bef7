"""UI-7: a new user's first click works offline. The playground and "Start a run"
preselect a configuration whose provider needs nothing from outside this host, with a task
to run; the select says which configurations need a key (and which variable) or a server."""

from __future__ import annotations

import re

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Provider, Run
from agentruns.runtime.loop import execute_run
from agentruns.selectors import ConfigurationChoice, preselected

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def options(page: str, select_id: str) -> dict[str, tuple[str, bool]]:
    """{value: (label, selected)} of one select."""
    body = re.search(rf'<select[^>]*id="{select_id}"[^>]*>(.*?)</select>', page, re.S)
    assert body, select_id
    return {
        value: (label, bool(selected))
        for value, selected, label in re.findall(
            r'<option value="([^"]*)"( selected)?>([^<]*)</option>', body.group(1)
        )
    }


def selected(found: dict[str, tuple[str, bool]]) -> list[str]:
    return [value for value, (_, chosen) in found.items() if chosen]


@pytest.mark.parametrize(
    ("url", "select_id", "task_id"),
    [
        ("/playground/", "id_configuration", "id_task"),
        ("/runs/", "id_start_configuration", "id_start_task"),
    ],
)
def test_ui7_the_first_choice_works_offline_and_the_others_say_what_they_need(
    client, staff, url, select_id, task_id
):
    client.force_login(staff)
    page = client.get(url).content.decode()
    found = options(page, select_id)
    assert selected(found) == ["multi-tool-demo"]
    assert found["anthropic-assistant"][0].endswith("· needs ANTHROPIC_API_KEY")
    assert found["openai-assistant"][0].endswith("· needs OPENAI_API_KEY")
    assert found["local-llm"][0].endswith("· needs the server at http://127.0.0.1:11434/v1")
    for scripted in ("multi-tool-demo", "approval-demo", "helpdesk", "secure-desk"):
        assert "needs" not in found[scripted][0]
    task = re.search(rf'<textarea[^>]*id="{task_id}"[^>]*>([^<]*)</textarea>', page)
    assert task and task.group(1) == "Write the standup note"


def test_ui7_pressing_run_on_the_fresh_playground_completes_a_run(client, staff):
    client.force_login(staff)
    page = client.get("/playground/").content.decode()
    form = {
        "configuration": selected(options(page, "id_configuration"))[0],
        "task": re.search(r'id="id_task"[^>]*>([^<]*)<', page).group(1),
        "action": "run",
    }
    assert client.post("/playground/", form).status_code == 302
    run = Run.objects.get()
    assert execute_run(run.pk) == Run.Status.COMPLETED


def test_ui7_a_configuration_that_needs_a_key_says_so_beside_the_readout(client, staff):
    client.force_login(staff)
    page = client.get("/playground/?configuration=anthropic-assistant").content.decode()
    assert selected(options(page, "id_configuration")) == ["anthropic-assistant"]
    assert "anthropic-assistant</strong> needs ANTHROPIC_API_KEY: without it its runs fail" in page
    page = client.get("/playground/").content.decode()
    assert 'id="configuration-needs"' not in page


def test_ui7_the_default_is_skipped_when_it_needs_a_key_and_a_scripted_one_taken(
    client, staff, settings
):
    settings.AGENTRUNS_DEFAULT_CONFIGURATION = "anthropic-assistant"
    client.force_login(staff)
    page = client.get("/playground/").content.decode()
    assert selected(options(page, "id_configuration")) == ["approval-demo"]  # first offline
    Provider.objects.filter(kind=Provider.Kind.SCRIPTED).update(kind=Provider.Kind.OPENAI)
    page = client.get("/runs/").content.decode()
    assert selected(options(page, "id_start_configuration")) == ["anthropic-assistant"]


def test_ui7_preselection_prefers_the_default_then_offline_then_the_first(settings):
    settings.AGENTRUNS_DEFAULT_CONFIGURATION = "b"
    online = ConfigurationChoice("a", "a", "needs A_KEY")
    assert preselected([online, ConfigurationChoice("b", "b", "")]) == "b"
    assert preselected([online, ConfigurationChoice("c", "c", "")]) == "c"
    assert preselected([online]) == "a"
    assert preselected([]) == ""
