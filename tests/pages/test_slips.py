"""UI-7's small slips, through Django's test client: no form puts the CSRF token in a URL
(the playground's and the admin's "Update readout" post), the inspector says what a
waiting call waits for and claims "live" only where a script makes it so, a refused answer
says so once, and an approval's message reads as a sentence."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Run, Snippet
from agentruns.words import WORDS
from tests.conftest import grant
from tests.support.hitl import active_ticket, identity
from tests.support.runs import park

pytestmark = pytest.mark.django_db

APP_CSS = Path(__file__).resolve().parents[2] / "playground" / "static" / "playground" / "app.css"


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


@pytest.fixture
def root(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return user


def forms(page: str) -> list[str]:
    return re.findall(r"<form\b.*?</form>", page, re.S)


def leaks_csrf_into_a_url(form: str) -> bool:
    """A GET form (or a button that turns it into one) carrying the CSRF token."""
    if "csrfmiddlewaretoken" not in form:
        return False
    opening = form[: form.index(">") + 1]
    return 'method="post"' not in opening.lower() or 'formmethod="get"' in form.lower()


def test_ui7_no_page_form_puts_the_csrf_token_in_a_url(client, root):
    helpdesk = Configuration.objects.get(slug="helpdesk")
    pages = [
        "/",
        "/playground/",
        "/runs/",
        "/inbox/",
        f"/admin/agentruns/configuration/{helpdesk.pk}/run/",
        f"/admin/agentruns/configuration/{helpdesk.pk}/change/",
    ]
    for url in pages:
        page = client.get(url).content.decode()
        assert forms(page), url
        assert not [f for f in forms(page) if leaks_csrf_into_a_url(f)], url


def test_ui7_update_readout_is_a_post_that_shows_the_readout_and_runs_nothing(client, root):
    changelog = Snippet.objects.get(slug="changelog")
    data = {"configuration": "helpdesk", "task": "kept", "snippets": [changelog.pk]}
    page = client.post("/playground/", {**data, "action": "readout"}).content.decode()
    assert 'name="action" value="readout"' in page
    readout = page[page.index('id="readout"') :]
    assert "changelog" in readout and "forced" in readout
    assert f'value="{changelog.pk}" checked' in page and ">kept</textarea>" in page
    helpdesk = Configuration.objects.get(slug="helpdesk")
    url = f"/admin/agentruns/configuration/{helpdesk.pk}/run/"
    page = client.post(url, {**data, "action": "readout"}).content.decode()
    assert "changelog" in page[page.index("Context readout") :]
    assert not Run.objects.exists()


def test_ui7_the_inspector_says_a_question_waits_for_an_answer(client, root):
    question = park(root, "question-demo")
    page = client.get(f"/playground/runs/{question.pk}/").content.decode()
    assert "Waiting for an answer" in page and "Waiting for approval" not in page
    approval = park(root, "approval-demo")
    page = client.get(f"/playground/runs/{approval.pk}/").content.decode()
    assert "Waiting for approval" in page and "Waiting for an answer" not in page


def test_ui7_live_is_claimed_only_where_a_script_polls(client, root):
    run = park(root, "approval-demo")
    for url in (f"/playground/runs/{run.pk}/", f"/runs/{run.pk}/"):
        page = client.get(url).content.decode()
        assert re.search(r'class="muted js-only">· (filling in|updating) live<', page), url
        assert '<span class="muted no-js-only">· reload to update</span>' in page
    assert '<html lang="en" class="no-js">' in page
    assert ".no-js .js-only, html:not(.no-js) .no-js-only { display: none; }" in APP_CSS.read_text()
    assert 'classList.remove("no-js")' in APP_CSS.with_name("app.js").read_text()


def test_ui7_a_refused_answer_says_so_once(client, root):
    run = park(root, "question-demo")
    ticket = active_ticket(run.pk)
    data = {**identity(ticket), "kind": "input", "value.severity": "high", "value.hours": "99"}
    response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data)
    assert response.status_code == 422
    page = unescape(response.content.decode())
    banner = re.search(r'<li class="message message-error">(.*?)</li>', page, re.S)
    assert banner and banner.group(1) == WORDS["invalid_input"]
    assert "does not fit the question's schema" not in page
    assert "At most 72." in page  # the why, beside its field


def test_ui7_an_approval_reads_as_a_sentence(client, root):
    grant(root, "approve_run")
    run = park(root, "approval-demo")
    ticket = active_ticket(run.pk)
    data = {**identity(ticket), "kind": "permission", "decision": "allow", "next": "/inbox/"}
    page = unescape(
        client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True).content.decode()
    )
    assert f"Approved: notes.write on run #{run.pk}; the run goes on and makes the call." in page
    assert "runs now." not in page
