"""The playground without JavaScript (FS-3, FS-5, CG-7, CG-10, UI-3, UI-6), through
Django's test client: plain POST forms with CSRF that redirect with a message."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentruns.demo import load_demo_data
from agentruns.models import Run, Snippet
from agentruns.runtime.loop import execute_run
from tests.conftest import grant

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


@pytest.fixture
def operator(client, staff):
    client.force_login(staff)
    return staff


def snippet(slug: str) -> Snippet:
    return Snippet.objects.get(slug=slug)


def test_fs5_the_playground_is_403_for_a_plain_user_and_for_staff_without_the_permission(
    client, member, django_user_model
):
    client.force_login(member)
    assert client.get("/playground/").status_code == 403
    assert client.post("/playground/", {"configuration": "helpdesk"}).status_code == 403
    other = django_user_model.objects.create_user("s2", password="pw", is_staff=True)
    client.force_login(other)
    assert client.get("/playground/").status_code == 403
    assert "playground permission" in client.get("/playground/readout/").content.decode()
    grant(other, "use_playground")
    assert client.get("/playground/").status_code == 200


def test_ui3_the_form_has_its_named_controls_and_labels_with_slug_title_and_class(client, operator):
    page = client.get("/playground/").content.decode()
    assert '<label for="id_configuration">Configuration</label>' in page
    assert '<label for="id_task">Task</label>' in page and "<textarea" in page
    assert '<label for="id_mode">Mode</label>' in page
    assert ">Run</button>" in page and ">Dry run</button>" in page
    for slug in ("merger-plans", "style-guide", "triage", "forensics"):
        assert f"<code>{slug}</code>" in page
    assert "Merger plans" in page and ">secret<" in page
    # The secret snippet's text never reaches the page.
    assert "Project Falcon" not in page


def test_cg10_ui6_the_readout_follows_the_ticked_boxes_and_marks_forced_sources(client, operator):
    plain = client.get("/playground/readout/?configuration=helpdesk").content.decode()
    assert "permitted" in plain and "forced" not in plain
    secret = snippet("merger-plans")
    forced = client.get(
        f"/playground/readout/?configuration=helpdesk&snippets={secret.pk}"
    ).content.decode()
    assert 'class="tag tag-forced">forced<' in forced
    assert "refused" in forced and "merger-plans" in forced and "secret" in forced
    for remedy in ("raise the provider", "remove", "correct its data class"):
        assert remedy in forced
    assert "Project Falcon" not in forced
    # The same readout without JavaScript: the page itself with the query.
    page = client.get(f"/playground/?configuration=helpdesk&snippets={secret.pk}")
    assert 'class="tag tag-forced">forced<' in page.content.decode()


def test_the_readout_fragment_swaps_the_mode_list_for_the_chosen_configuration(client, operator):
    fragment = client.get(
        "/playground/readout/?configuration=deferred-demo", headers={"HX-Request": "true"}
    ).content.decode()
    assert 'hx-swap-oob="true"' in fragment and ">chat<" in fragment


def test_run_submits_through_the_service_and_redirects_to_the_inspector(client, operator):
    response = client.post(
        "/playground/",
        {"configuration": "multi-tool-demo", "task": "Write the standup", "action": "run"},
    )
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/playground/runs/{run.pk}/"
    assert run.created_by == operator and run.input == "Write the standup"
    execute_run(run.pk)
    page = client.get(response["Location"]).content.decode()
    assert f"Run #{run.pk} started" in page
    assert 'data-call="' in page and "notes.write" in page and "Saved the standup note." in page
    assert "tools offered: <code>clock.now</code>" in page and "ms</span>" in page


def test_a_forced_secret_snippet_run_is_refused_with_its_slug_class_and_remedies(client, operator):
    secret = snippet("merger-plans")
    client.post(
        "/playground/",
        {"configuration": "helpdesk", "task": "go", "snippets": [secret.pk], "action": "run"},
    )
    run = Run.objects.get()
    assert run.forced_snippet_ids == [secret.pk]
    assert execute_run(run.pk) == Run.Status.FAILED
    page = client.get(f"/playground/runs/{run.pk}/").content.decode()
    assert page.count("The context gate refused this run") == 1
    assert "Refused by the context gate: The context gate" not in page
    assert "merger-plans" in page and "secret" in page and "correct its data class" in page
    assert "Project Falcon" not in page


def test_fs3_dry_run_shows_the_assembled_messages_and_stores_nothing(client, operator):
    style = snippet("changelog")
    page = client.post(
        "/playground/",
        {"configuration": "helpdesk", "task": "hello", "snippets": [style.pk], "action": "dry"},
    ).content.decode()
    assert "Dry run: nothing was sent" in page
    assert "v2.3 adds bulk export." in page and "hello" in page
    assert "<code>clock.now</code>" in page
    assert not Run.objects.exists()


def test_a_submission_the_service_rejects_keeps_what_was_typed_and_says_why(client, operator):
    response = client.post(
        "/playground/", {"configuration": "helpdesk", "task": "   ", "action": "run"}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Give the task to run." in page and "not valid" in page
    assert not Run.objects.exists()


def test_csrf_is_required_on_the_playground_form(operator):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    response = strict.post("/playground/", {"configuration": "helpdesk", "task": "go"})
    assert response.status_code == 403
    assert not Run.objects.exists()


def test_fs3_a_dry_run_the_gate_would_refuse_says_so_and_that_its_text_is_not_sent(
    client, operator
):
    secret = snippet("merger-plans")
    form = {"configuration": "helpdesk", "task": "hi", "snippets": [secret.pk], "action": "dry"}
    page = client.post("/playground/", form).content.decode()
    assert "Dry run: this send would be refused" in page
    assert "Dry run: nothing was sent" not in page and "would receive" not in page
    assert "The text below is shown to you, not sent" in page
    assert "Project Falcon" in page  # FS-3: the operator may still read it

    api = APIClient()
    api.force_authenticate(operator)
    body = {"configuration": "helpdesk", "input": "hi", "dry_run": True}
    refused = api.post("/api/runs/", {**body, "forced_snippets": [secret.pk]}, format="json")
    assert refused.status_code == 200, refused.content
    assert refused.json()["would_be_refused"] is True
    assert "shown to you, not sent" in refused.json()["notice"]
    allowed = api.post("/api/runs/", body, format="json").json()
    assert allowed["would_be_refused"] is False and "not sent" in allowed["notice"]
    assert not Run.objects.exists()
