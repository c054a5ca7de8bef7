"""GOV-4: replay before promoting. The recorded tasks of chosen runs re-run on a candidate
configuration through the loop, every tool call answered from the original's log by tool
name and arguments (nothing executes; a call the original never made is an error result
"not in the recording"), gated like any send, creating no ticket; a table of what
changed over the API and on a page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agentruns import events as ev
from agentruns.models import Event, Replay, Run, Ticket, ToolInvocation, Webhook, WebhookDelivery
from agentruns.runtime.loop import execute_run
from agentruns.services.fork import ForkRequest, run_fork
from agentruns.services.replays import replay_start
from agentruns.services.webhooks import REPLAYED, webhook_deliver_due
from tests.conftest import grant
from tests.support.catalog import (
    make_openai_configuration,
    make_skill,
    make_snippet,
    scripted_configuration,
)
from tests.support.fake_provider import FakeProvider
from tests.support.ops import Receiver, hook_owner
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

WRITE = "test.external_write"


def write(value: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": WRITE, "arguments": {"value": value}}]}


@pytest.fixture
def fake():
    with FakeProvider() as provider:
        yield provider


def replay(client: Any, runs: list[int], configuration: str) -> Any:
    return client.post("/api/replays/", {"runs": runs, "configuration": configuration}, "json")


def drive(replay_id: int) -> None:
    """Each of the replay's runs to its end, as a worker takes them."""
    for run_id in Replay.objects.get(pk=replay_id).runs.values_list("pk", flat=True):
        assert execute_run(run_id) in {Run.Status.COMPLETED, Run.Status.FAILED}


def results(run: Run) -> list[dict[str, Any]]:
    rows = Event.objects.filter(run=run, type=ev.TOOL_RESULT).order_by("sequence")
    return [row.payload for row in rows]


@pytest.fixture
def ledger(fake, staff, effects) -> Run:
    """The original: two writes, each an external effect, then a reply; the current
    configuration exempts the write from approval."""
    make_openai_configuration("ledger", fake, allowed_tools=["test"], approval_exempt_tools=[WRITE])
    fake.queue(write("v1"), write("v2"), {"text": "wrote v1 and v2"})
    run = submit(staff, "ledger", "write two values")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert effects.read_text().splitlines() == [
        f"{run.pk}:{call}:{value}"
        for call, value in zip(
            Event.objects.filter(run=run, type=ev.TOOL_RESULT)
            .order_by("sequence")
            .values_list("payload__call_id", flat=True),
            ("v1", "v2"),
            strict=True,
        )
    ]
    fake.clear()
    return run


def test_gov4_a_replay_answers_calls_from_the_recording_and_executes_nothing(
    ledger, fake, api, effects
):
    """The candidate asks for approval of every write (no exemption): a replay still opens
    no ticket, the recorded call gets its recorded result, the new one is not in the
    recording, and the effect log is untouched."""
    before = effects.read_text()
    make_openai_configuration("candidate", fake, zone="local", allowed_tools=["test"])
    fake.queue(write("v1"), write("v3"), {"text": "wrote v1 only"})

    response = replay(api, [ledger.pk], "candidate")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "running"
    drive(body["id"])

    assert effects.read_text() == before  # no tool ran
    (run,) = Run.objects.filter(replay_id=body["id"])
    assert run.status == Run.Status.COMPLETED and run.replay_of_id == ledger.pk
    assert not Ticket.objects.filter(run=run).exists()
    served, missing = results(run)
    assert (served["status"], served["content"]) == ("ok", "wrote v1")
    assert missing["status"] == "error"
    assert "not in the recording" in missing["content"]
    assert f"run #{ledger.pk} never called {WRITE}" in missing["content"]
    assert set(ToolInvocation.objects.filter(run=run).values_list("effect_sent_at", flat=True)) == {
        None
    }
    first = fake.requests[0].body["messages"]
    assert [m["role"] for m in first] == ["user"] and first[0]["content"] == "write two values"

    table = api.get(f"/api/replays/{body['id']}/").json()
    assert table["status"] == "done" and table["configuration"] == "candidate"
    (row,) = table["results"]
    assert row["run"] == ledger.pk and row["replay_run"] == run.pk
    assert row["status"] == "completed" and row["final_reply_changed"] is True
    assert row["tool_calls"] == {"added": [], "removed": []}  # two writes each
    assert row["verdict"] == "sent" and row["original_verdict"] == "sent"
    assert row["usage"]["input_tokens"] > 0
    assert row["original_usage"]["input_tokens"] > 0


def test_gov4_a_replay_on_the_same_behaviour_changes_nothing_in_the_table(
    ledger, fake, api, effects
):
    """The candidate exempts the write as the original's configuration does: the loop
    would run it at once, but a replay's recording answers it."""
    before = effects.read_text()
    make_openai_configuration("same", fake, allowed_tools=["test"], approval_exempt_tools=[WRITE])
    fake.queue(write("v1"), write("v2"), {"text": "wrote v1 and v2"})
    body = replay(api, [ledger.pk], "same").json()
    drive(body["id"])

    assert effects.read_text() == before
    (row,) = api.get(f"/api/replays/{body['id']}/").json()["results"]
    assert row["final_reply_changed"] is False
    assert row["tool_calls"] == {"added": [], "removed": []}


def test_gov4_fewer_calls_are_removed_and_other_tools_added(ledger, fake, api):
    make_openai_configuration("echoing", fake, allowed_tools=["test"])
    fake.queue(
        {"tool_calls": [{"name": "test.echo", "arguments": {"text": "hi"}}]}, {"text": "done"}
    )
    body = replay(api, [ledger.pk], "echoing").json()
    drive(body["id"])

    (row,) = api.get(f"/api/replays/{body['id']}/").json()["results"]
    assert row["tool_calls"] == {"added": ["test.echo"], "removed": [WRITE, WRITE]}


def test_gov4_a_send_the_gate_refuses_is_a_refused_verdict(fake, staff, api):
    """CG-7: the original carried a restricted snippet; the candidate's provider is
    external: the replay's first send is refused and nothing reaches the provider."""
    records = make_snippet("customer-records", data_class="restricted")
    scripted_configuration("inside", [{"text": "ok"}], snippets=[records])
    original = submit(staff, "inside", "look up the customer")
    assert execute_run(original.pk) == Run.Status.COMPLETED
    make_openai_configuration("outside", fake, zone="external_global")

    body = replay(api, [original.pk], "outside").json()
    drive(body["id"])

    assert fake.requests == []
    (row,) = api.get(f"/api/replays/{body['id']}/").json()["results"]
    assert (row["status"], row["verdict"], row["original_verdict"]) == ("failed", "refused", "sent")


def test_gov4_replays_need_the_playground(ledger, fake, staff, django_user_model, client):
    from rest_framework.test import APIClient

    make_openai_configuration("candidate", fake)
    colleague = django_user_model.objects.create_user("colleague", is_staff=True)
    grant(colleague, "view_all_runs")  # sees the run, may not use the playground
    caller = APIClient()
    caller.force_authenticate(colleague)

    response = replay(caller, [ledger.pk], "candidate")

    assert response.status_code == 403 and response.json()["code"] == "not_permitted"
    assert not Replay.objects.exists()


def test_gov4_a_run_the_caller_may_not_see_is_unknown(ledger, fake, django_user_model):
    from rest_framework.test import APIClient

    make_openai_configuration("candidate", fake)
    other = grant(django_user_model.objects.create_user("other", is_staff=True), "use_playground")
    caller = APIClient()
    caller.force_authenticate(other)

    hidden = replay(caller, [ledger.pk], "candidate")
    missing = replay(caller, [10**9], "candidate")

    for response in (hidden, missing):
        assert response.status_code == 400
        assert response.json()["code"] == "invalid" and "Unknown run ids" in str(response.json())
    assert not Replay.objects.exists()


def test_gov4_at_most_100_runs_and_only_ended_ones(ledger, fake, api, staff):
    make_openai_configuration("candidate", fake)
    too_many = replay(api, list(range(1, 102)), "candidate")
    live = submit(staff, "ledger", "still queued")

    queued = replay(api, [live.pk], "candidate")

    assert too_many.status_code == 400 and "runs" in str(too_many.json())
    assert queued.status_code == 400 and "have not ended" in str(queued.json())


def test_gov4_another_users_replay_is_not_found(ledger, fake, api, django_user_model):
    from rest_framework.test import APIClient

    make_openai_configuration("candidate", fake)
    fake.queue({"text": "x"})
    body = replay(api, [ledger.pk], "candidate").json()
    other = grant(django_user_model.objects.create_user("other", is_staff=True), "use_playground")
    caller = APIClient()
    caller.force_authenticate(other)

    assert caller.get(f"/api/replays/{body['id']}/").status_code == 404
    assert caller.get("/api/replays/").json()["results"] == []


def test_gov4_replay_runs_are_not_listed_among_the_callers_runs(ledger, fake, api):
    make_openai_configuration("candidate", fake)
    fake.queue({"text": "x"})
    body = replay(api, [ledger.pk], "candidate").json()
    drive(body["id"])
    (run,) = Run.objects.filter(replay_id=body["id"])

    listed = [row["id"] for row in api.get("/api/runs/").json()["results"]]

    assert ledger.pk in listed and run.pk not in listed
    detail = api.get(f"/api/runs/{run.pk}/").json()
    assert detail["replay"] == {"id": body["id"], "of": ledger.pk}
    assert api.get(f"/api/runs/{ledger.pk}/").json()["replay"] is None


def test_gov4_a_replays_events_go_to_no_webhook(ledger, fake, api, settings):
    """Its original's events were delivered when they happened; a receiver must not act
    on a re-enactment of them (SEC-15's withholding, with its own reason)."""
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    receiver = Receiver([200])
    try:
        Webhook.objects.create(
            url=receiver.url, events=[], secret="s" * 32, created_by=hook_owner()
        )
        make_openai_configuration("candidate", fake, allowed_tools=["test"])
        fake.queue(write("v1"), {"text": "done"})
        body = replay(api, [ledger.pk], "candidate").json()
        drive(body["id"])
        queued = WebhookDelivery.objects.all()
        assert queued.count() >= 4  # opening, turn, result, turn, end

        webhook_deliver_due()

        assert receiver.received == []
        assert set(queued.values_list("status", "last_error")) == {("withheld", REPLAYED)}
    finally:
        receiver.close()


def test_gov4_the_page_replays_the_runs_lists_ended_runs_and_shows_the_table(
    ledger, fake, staff, effects
):
    """Without JavaScript: the runs list links its ended runs to the replay form, a plain
    POST with CSRF starts the replay, and its page shows the same table as the API."""
    before = effects.read_text()
    candidate = make_openai_configuration("candidate", fake, allowed_tools=["test"])
    fake.queue(write("v1"), {"text": "only v1"})
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    runs_page = client.get("/runs/").content.decode()
    assert f'href="/replays/?runs={ledger.pk}"' in runs_page

    admin_page = client.get(f"/admin/agentruns/configuration/{candidate.pk}/change/")
    assert 'href="/replays/?configuration=candidate"' in admin_page.content.decode()
    form = client.get(f"/replays/?runs={ledger.pk}&configuration=candidate").content.decode()
    assert f'name="runs" id="id_replay_runs" value="{ledger.pk}"' in form
    assert '<option value="candidate" selected>' in form
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token
    refused = client.post("/replays/", {"runs": str(ledger.pk), "configuration": "candidate"})
    assert refused.status_code == 403 and not Replay.objects.exists()  # CSRF
    started = client.post(
        "/replays/",
        {"runs": str(ledger.pk), "configuration": "candidate", "csrfmiddlewaretoken": token[1]},
    )
    replay_row = Replay.objects.get()
    assert started.status_code == 302 and started["Location"] == f"/replays/{replay_row.pk}/"
    drive(replay_row.pk)

    table = client.get(f"/replays/{replay_row.pk}/").content.decode()
    run = Run.objects.get(replay=replay_row)
    row = re.search(
        rf'<tr data-original="{ledger.pk}" data-replay-run="{run.pk}">(.*?)</tr>', table, re.S
    )
    assert row, table
    assert 'data-final-reply-changed="true"' in row[1] and "only v1" in row[1]
    assert f"removed {WRITE}" in row[1] and "<td>sent</td>" in row[1]
    assert '<div id="replay-table">' in table  # done: its table polls no more
    assert effects.read_text() == before
    assert f'data-run="{run.pk}"' not in client.get("/runs/").content.decode()
    for page in (f"/runs/{run.pk}/", f"/playground/runs/{run.pk}/"):  # page, inspector
        assert f'href="/replays/{replay_row.pk}/"' in client.get(page).content.decode(), page
    timeline = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"replay #{replay_row.pk} of run #{ledger.pk} on candidate" in timeline


def test_gov4_the_page_is_the_playgrounds(ledger, django_user_model, client):
    colleague = django_user_model.objects.create_user("colleague", is_staff=True)
    client.force_login(colleague)

    assert client.get("/replays/").status_code == 403
    assert (
        client.post("/replays/", {"runs": str(ledger.pk), "configuration": "x"}).status_code == 403
    )
    assert "/replays/" not in client.get("/runs/").content.decode()


def test_gov4_a_follow_up_is_replayed_after_its_threads_earlier_turns(fake, staff, api):
    """CG-13 as for a fork: the task is the run's prompt after what the thread held."""
    make_openai_configuration("chat", fake)
    fake.queue({"text": "first answer"}, {"text": "second answer"})
    first = submit(staff, "chat", "first prompt")
    assert execute_run(first.pk) == Run.Status.COMPLETED
    second = submit(staff, "chat", "second prompt", thread=first.thread_id)
    assert execute_run(second.pk) == Run.Status.COMPLETED
    fake.clear()
    make_openai_configuration("candidate", fake)
    fake.queue({"text": "second answer"})

    body = replay(api, [second.pk], "candidate").json()
    drive(body["id"])

    (request,) = fake.requests
    assert [(m["role"], m["content"]) for m in request.body["messages"]] == [
        ("user", "first prompt"),
        ("assistant", "first answer"),
        ("user", "second prompt"),
    ]
    (row,) = api.get(f"/api/replays/{body['id']}/").json()["results"]
    assert row["final_reply_changed"] is False and row["run"] == second.pk


# What starting one run writes however it started (`services.runs.run_open`): its thread,
# the run, its log (the thread's lock, its last sequence, the events, their webhook
# deliveries) and its wake-up (the queue row, the run's note of it, the notification).
RUN_OPEN_STATEMENTS = 9


def started(user: Any, originals: list[Run], configuration: str) -> int:
    """How many statements starting a replay of `originals` took."""
    with CaptureQueriesContext(connection) as statements:
        replay_start(user=user, runs=[run.pk for run in originals], configuration=configuration)
    return len(statements.captured_queries)


def test_gov4_starting_a_replay_reads_what_its_originals_carry_in_a_constant_number_of_statements(
    staff,
):
    """PERF: a replay of 100 runs starts in one request. What each original carries (CG-13:
    its configuration's sources, its forced set, what a fork carried, the thread's earlier
    runs') is read for all of them at once: each more original costs only the statements
    that start its run."""
    records, manual = make_snippet("records", data_class="internal"), make_skill("manual")
    kinds = [
        scripted_configuration(f"kind-{i}", [{"text": "ok"}] * 4, snippets=[records])
        for i in range(3)
    ]
    scripted_configuration("candidate", [{"text": "x"}])
    originals, earlier_runs = [], []
    for i, configuration in enumerate(kinds * 2):
        forced = {"forced_snippets": [records.pk], "forced_skills": [manual.pk]} if i % 2 else {}
        earlier = submit(staff, configuration.slug, f"first {i}", **forced)
        assert execute_run(earlier.pk) == Run.Status.COMPLETED
        follow_up = submit(staff, configuration.slug, f"then {i}", thread=earlier.thread_id)
        assert execute_run(follow_up.pk) == Run.Status.COMPLETED
        originals.append(follow_up)
        earlier_runs.append(earlier)
    fork = run_fork(user=staff, run_id=originals[1].pk, request=ForkRequest(input="and more"))
    assert execute_run(fork.pk) == Run.Status.COMPLETED
    originals.append(fork)

    two = started(staff, originals[-2:], "candidate")  # a forced set carried, and a fork
    seven = started(staff, originals, "candidate")

    assert seven - two <= 5 * RUN_OPEN_STATEMENTS, (two, seven)
    replayed = Run.objects.filter(replay_of=fork).first()  # carries what the fork did (CG-13)
    carried = Event.objects.get(run=replayed, sequence=1).payload["carried"]
    assert {"kind": "skill", "id": manual.pk, "from": earlier_runs[1].pk} in carried


def test_gov4_the_page_says_an_unpriced_originals_cost_is_not_priced(ledger, fake, staff):
    """OPS-1 on the replay page: the original ran on a configuration without prices, so its
    cost is unknown ("not priced"), not nothing, beside the priced candidate's."""
    assert not ledger.configuration.input_token_price  # the original's names no price
    candidate = make_openai_configuration("priced", fake, allowed_tools=["test"])
    candidate.input_token_price, candidate.output_token_price = 3, 15
    candidate.save()
    fake.queue(write("v1"), {"text": "only v1"})
    body = replay_start(user=staff, runs=[ledger.pk], configuration="priced")
    drive(body.pk)
    client = Client()
    client.force_login(staff)

    table = client.get(f"/replays/{body.pk}/").content.decode()

    assert re.search(r'<td>[\d.]+ USD <span class="muted">\(was not priced\)</span></td>', table)


def test_gov4_a_replay_run_not_yet_ended_claims_no_changed_calls(ledger, fake, staff, api):
    """Before its run is taken, a replay has removed no call: the API's lists are empty and
    the page says "—" where it will say what changed."""
    make_openai_configuration("waiting", fake, allowed_tools=["test"])
    body = replay(api, [ledger.pk], "waiting").json()
    (row,) = api.get(f"/api/replays/{body['id']}/").json()["results"]
    assert row["status"] == "queued" and row["tool_calls"] == {"added": [], "removed": []}
    client = Client()
    client.force_login(staff)

    table = client.get(f"/replays/{body['id']}/").content.decode()

    cells = re.search(r'<tr data-original="\d+" data-replay-run="\d+">(.*?)</tr>', table, re.S)
    assert cells and "removed" not in cells[1] and "same" not in cells[1]
