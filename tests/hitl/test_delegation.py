"""Delegation (DEL-1..DEL-4): a run hands a task to a delegate configuration and parks on
a `delegation` ticket; the child run's end is the call's result exactly once, through the
same wake-up a person's answer is."""

from __future__ import annotations

from typing import Any

import pytest

from agentruns import events as ev
from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Event, Run, Ticket
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from agentruns.selectors import run_readout
from agentruns.services.fork import ForkRequest, run_fork
from agentruns.services.replays import replay_start
from agentruns.services.runs import run_cancel
from playground.runs import delegation_tree
from tests.conftest import grant
from tests.support.catalog import make_openai_configuration, make_snippet, scripted_configuration
from tests.support.crash import crash_in_process, expire_lease, fault_hook, history
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import active_ticket, allow, client_for, results_by_call, resume
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


def delegate_call(configuration: str = "lookup", task: str = "find the owner") -> dict[str, Any]:
    return {"name": "agent.delegate", "arguments": {"configuration": configuration, "task": task}}


def tree(
    *,
    child_turns: list[dict[str, Any]] | None = None,
    parent_turns: list[dict[str, Any]] | None = None,
    child_zone: str = "local",
    **parent_kw: Any,
):
    """A `triage` configuration whose delegate is `lookup`."""
    child = scripted_configuration(
        "lookup", child_turns or [{"text": "the owner is Ada"}], zone=child_zone
    )
    parent = scripted_configuration(
        "triage",
        parent_turns or [{"tool_calls": [delegate_call()]}, {"text": "triaged"}],
        **parent_kw,
    )
    parent.delegates.set([child])
    return parent, child


def child_of(run: Run) -> Run:
    return Run.objects.get(parent=run)


def test_a_delegation_parks_the_parent_and_its_childs_end_is_the_result_DEL_1(staff):
    tree()
    parent = submit(staff, "triage")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    ticket = active_ticket(parent.pk)
    child = child_of(parent)
    assert ticket.kind == Ticket.Kind.DELEGATION and ticket.child_id == child.pk
    assert ticket.deadline is None  # nobody answers it; it never expires
    assert child.status == Run.Status.QUEUED and child.input == "find the owner"
    assert child.created_by == staff and child.root_id == parent.pk
    assert child.parent_call_id == ticket.call_id
    parked = Run.objects.get(pk=parent.pk)  # it holds no worker while its child works
    assert (parked.status, parked.lease_owner, parked.lease_expires_at) == ("awaiting", "", None)

    assert execute_run(child.pk) == Run.Status.COMPLETED
    parent.refresh_from_db()
    assert parent.status == Run.Status.QUEUED  # woken, as an answer wakes it
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ANSWERED
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    result = results_by_call(parent.pk)[ticket.call_id]
    assert (result["status"], result["content"]) == (ev.OK, "the owner is Ada")
    assert Event.objects.filter(run=parent, type=ev.TOOL_RESULT).count() == 1


def test_a_child_that_fails_is_an_error_result_never_a_failed_parent_DEL_4(staff):
    tree(child_turns=[{"error": {"status": 400, "message": "bad request"}}])
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    assert execute_run(child.pk) == Run.Status.FAILED
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    (result,) = results_by_call(parent.pk).values()
    assert result["status"] == ev.ERROR and f"run #{child.pk} failed" in result["content"]


def test_a_configuration_not_among_the_delegates_is_an_error_result_DEL_1(staff):
    tree(parent_turns=[{"tool_calls": [delegate_call("elsewhere")]}, {"text": "ok"}])
    parent = submit(staff, "triage")
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    (result,) = results_by_call(parent.pk).values()
    assert (
        result["status"] == ev.ERROR
        and "not one of this configuration's delegates" in (result["content"])
    )
    assert not Run.objects.filter(parent=parent).exists()


def test_a_host_cannot_resume_a_delegation_ticket_DEL_1(staff):
    approver = grant(staff, "approve_run")
    tree()
    parent = submit(approver, "triage")
    execute_run(parent.pk)
    ticket = active_ticket(parent.pk)
    response = resume(client_for(approver), parent.pk, allow(ticket))
    assert response.status_code == 422, response.json()
    assert response.json()["code"] == "result_kind_mismatch"
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ACTIVE


def test_the_childs_sends_carry_the_parents_class_DEL_2(staff):
    """A parent holding confidential text may not launder it through a child whose
    provider is outside the zone that may receive it: the child is refused before it
    sends anything, and the parent gets that as an error result."""
    secret = make_snippet("payroll", data_class="confidential")
    tree(child_zone="external_global", snippets=[secret])
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    assert execute_run(child.pk) == Run.Status.FAILED
    child.refresh_from_db()
    assert child.failure["code"] == "context_refused"
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    (result,) = results_by_call(parent.pk).values()
    assert result["status"] == ev.ERROR and "context_refused" in result["content"]


def test_the_childs_result_carries_the_childs_class_back_DEL_2(staff):
    child = scripted_configuration("lookup", [{"text": "found it"}])
    child.system_prompt, child.system_prompt_data_class = "Look it up.", "confidential"
    child.save()
    parent = scripted_configuration(
        "triage", [{"tool_calls": [delegate_call()]}, {"text": "triaged"}]
    )
    parent.delegates.set([child])
    run = submit(staff, "triage")
    execute_run(run.pk)
    execute_run(child_of(run).pk)
    execute_run(run.pk)
    (result,) = results_by_call(run.pk).values()
    assert result["class"] == "confidential"


# ---------------------------------------------------------------- crashes of either run


def drive_tree(user: Any, crash: tuple[str, str] | None = None) -> Run:
    """Parent to its end through its child; `crash` ("parent"|"child", "commit:N") kills
    that run's first drive there, and the run is then recovered as the sweeper would."""
    parent = submit(user, "triage")
    drive(parent.pk, "parent", crash, Run.Status.AWAITING)
    child = child_of(parent)
    drive(child.pk, "child", crash, Run.Status.COMPLETED)
    drive(parent.pk, "parent", crash, Run.Status.COMPLETED)
    return parent


IDS = ("correlation_id", "child")


def comparable(run_id: int) -> list[tuple[str, dict[str, Any]]]:
    """The run's history without the ids each tree has its own of."""
    return [
        (kind, {key: value for key, value in payload.items() if key not in IDS})
        for kind, payload in history(run_id)
    ]


def drive(run_id: int, who: str, crash: tuple[str, str] | None, expected: str) -> None:
    run = Run.objects.get(pk=run_id)
    if run.status != Run.Status.QUEUED and run.status != Run.Status.RUNNING:
        return  # a crash after its commit already left it where this drive would
    if crash and crash[0] == who:
        try:
            crash_in_process(run_id, crash[1])
        except AssertionError:
            pass  # this drive ends before the point: nothing to kill here
        else:
            if Run.objects.get(pk=run_id).status == Run.Status.RUNNING:
                expire_lease(run_id)
    if Run.objects.get(pk=run_id).status in (Run.Status.QUEUED, Run.Status.RUNNING):
        assert execute_run(run_id) == expected


def test_a_kill_at_every_commit_of_either_run_reaches_the_uninterrupted_end_DEL_1(staff):
    """REC-1 with DEL-1: a SIGKILL at each commit boundary of the parent's or the child's
    drives ends as the uninterrupted tree does, the child run once and its result once."""
    tree()
    with fault_hook(lambda name, count: None) as points:
        baseline = drive_tree(staff)
    expected = comparable(baseline.pk)
    commits = sorted({p for p in points if p.startswith(faults.COMMIT)})
    assert len(commits) >= 3
    for who in ("parent", "child"):
        for point in commits:
            parent = drive_tree(staff, (who, point))
            assert comparable(parent.pk) == expected, (who, point)
            assert Run.objects.filter(parent=parent).count() == 1, (who, point)
            (result,) = results_by_call(parent.pk).values()
            assert result["content"] == "the owner is Ada"


# ---------------------------------------------------------------- bounds and cancels


def test_delegation_goes_no_deeper_than_the_bound_DEL_3(staff, settings):
    settings.AGENTRUNS_MAX_DELEGATION_DEPTH = 1
    tree(child_turns=[{"tool_calls": [delegate_call("deeper")]}, {"text": "gave up"}])
    Configuration.objects.get(slug="lookup").delegates.set(
        [scripted_configuration("deeper", [{"text": "never"}])]
    )
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    assert execute_run(child.pk) == Run.Status.COMPLETED
    (result,) = results_by_call(child.pk).values()
    assert result["status"] == ev.ERROR and "1 runs deep" in result["content"]
    assert not Run.objects.filter(parent=child).exists()


def test_the_tool_calls_of_a_whole_tree_stay_within_the_roots_budget_DEL_3(staff):
    """The root allows 3 calls; delegating spends one, so the child may make 2 of the 5
    it proposes (its own configuration allows 10), and the parent, told of them, none."""
    five = [{"name": "notes.read", "arguments": {"title": f"t{i}"}} for i in range(5)]
    tree(
        child_turns=[{"tool_calls": five}, {"text": "read what I could"}],
        parent_turns=[
            {"tool_calls": [delegate_call()]},
            {"tool_calls": [{"name": "notes.read", "arguments": {"title": "x"}}]},
            {"text": "done"},
        ],
        max_tool_calls=3,
    )
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    assert execute_run(child.pk) == Run.Status.COMPLETED
    statuses = [r["status"] for r in results_by_call(child.pk).values()]
    assert statuses.count(ev.OK) == 2 and statuses.count(ev.REFUSED) == 3
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    last = list(results_by_call(parent.pk).values())[-1]
    assert last["status"] == ev.REFUSED and "budget of 3" in last["content"]


def test_cancelling_a_parent_cancels_its_child_and_voids_the_childs_ticket_DEL_4(staff):
    write = {"name": "notes.write", "arguments": {"title": "t", "body": "b"}}
    tree(child_turns=[{"tool_calls": [write]}, {"text": "wrote"}])
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    assert execute_run(child.pk) == Run.Status.AWAITING  # waits for an approval
    child_ticket = active_ticket(child.pk)
    run_cancel(user=staff, run_id=parent.pk)
    child.refresh_from_db()
    child_ticket.refresh_from_db()
    assert child.status == Run.Status.CANCELLED
    assert child_ticket.status == Ticket.Status.VOID
    assert Run.objects.get(pk=parent.pk).status == Run.Status.CANCELLED


def test_a_cancelled_child_is_an_error_result_for_its_parent_DEL_4(staff):
    write = {"name": "notes.write", "arguments": {"title": "t", "body": "b"}}
    tree(child_turns=[{"tool_calls": [write]}, {"text": "wrote"}])
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    execute_run(child.pk)
    run_cancel(user=staff, run_id=child.pk)
    assert Run.objects.get(pk=parent.pk).status == Run.Status.QUEUED
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    (result,) = results_by_call(parent.pk).values()
    assert result["status"] == ev.ERROR and "was cancelled" in result["content"]


def test_a_fork_after_the_delegation_reuses_the_childs_result_and_runs_no_child_DEL_6(staff):
    tree(
        parent_turns=[
            {"tool_calls": [delegate_call()]},
            {"text": "triaged"},
            {"text": "again"},
        ]
    )
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    execute_run(child_of(parent).pk)
    execute_run(parent.pk)
    turn = Event.objects.filter(run=parent, type=ev.ASSISTANT).order_by("sequence").first()
    assert turn is not None and turn.payload["tool_calls"][0]["name"] == "agent.delegate"
    body = {"at": turn.sequence}
    response = client_for(staff).post(f"/api/runs/{parent.pk}/fork/", body, format="json")
    assert response.status_code in (200, 201), response.json()
    fork = Run.objects.get(pk=response.json()["id"])
    assert execute_run(fork.pk) == Run.Status.COMPLETED
    assert Run.objects.get(pk=fork.pk).final_reply == "triaged"
    assert Run.objects.filter(parent__isnull=False).count() == 1  # the original's only
    assert not Run.objects.filter(parent=fork).exists()


# ---------------------------------------------------------------- where a child's tickets come from


def test_a_childs_ticket_shows_its_origin_and_the_delegation_ticket_is_listed_nowhere_DEL_4(
    staff, client, admin_client
):
    approver = grant(staff, "approve_run")
    write = {"name": "notes.write", "arguments": {"title": "t", "body": "b"}}
    tree(child_turns=[{"tool_calls": [write]}, {"text": "wrote"}])
    parent = submit(approver, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    execute_run(child.pk)
    api = client_for(approver)
    listed = api.get("/api/tickets/").json()
    tickets = listed["results"] if isinstance(listed, dict) else listed
    assert [t["run"] for t in tickets] == [child.pk]  # the parent's delegation ticket is not
    origin = {"root": parent.pk, "parent": parent.pk, "initiator": approver.get_username()}
    assert tickets[0]["origin"] == origin
    client.force_login(approver)
    inbox = client.get("/inbox/").content.decode()
    assert f'Delegated by <a href="/runs/{parent.pk}/">run #{parent.pk}</a>' in inbox
    admin_page = admin_client.get("/admin/agentruns/ticket/").content.decode()
    assert f"delegated by run #{parent.pk}" in admin_page


def test_the_run_has_its_parent_and_children_and_the_page_shows_the_tree_DEL_5(staff, client):
    tree()
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    api = client_for(staff)
    body = api.get(f"/api/runs/{parent.pk}/").json()
    assert body["parent"] is None and body["children"] == [child.pk]
    assert body["ticket"]["target"]["kind"] == "delegation"
    child_body = api.get(f"/api/runs/{child.pk}/").json()
    assert child_body["parent"] == {"run": parent.pk, "call_id": child.parent_call_id}
    assert child_body["children"] == []
    client.force_login(staff)
    page = client.get(f"/runs/{parent.pk}/").content.decode()
    assert f'<a href="/runs/{child.pk}/">#{child.pk}</a> lookup' in page
    child_page = client.get(f"/runs/{child.pk}/").content.decode()
    assert f'Delegated by <a href="/runs/{parent.pk}/">run #{parent.pk}</a>' in child_page


def test_the_run_names_every_child_it_waits_for_not_only_the_newest_ticket_DEL_1_DEL_5(
    staff, client
):
    """Two delegations of one turn open a ticket each; `ticket` shows one of them (as it
    always did), `waiting_on` every child still running, in the calls' order, and the run
    page names the same children."""
    calls = [delegate_call(task="find the owner"), delegate_call(task="find the runbook")]
    tree(parent_turns=[{"tool_calls": calls}, {"text": "triaged"}])
    parent = submit(staff, "triage")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    first, second = Run.objects.filter(parent=parent).order_by("id")
    assert (first.input, second.input) == ("find the owner", "find the runbook")
    api = client_for(staff)

    body = api.get(f"/api/runs/{parent.pk}/").json()
    assert body["waiting_on"] == [first.pk, second.pk]
    assert body["ticket"]["target"]["kind"] == "delegation"
    assert body["ticket"]["target"]["child"] in (first.pk, second.pk)

    client.force_login(staff)
    links = (f'<a href="/runs/{pk}/">#{pk}</a>' for pk in (first.pk, second.pk))
    waits = "Waiting for its child runs {}, {}".format(*links)
    assert waits in client.get(f"/runs/{parent.pk}/").content.decode()

    assert execute_run(second.pk) == Run.Status.COMPLETED
    assert api.get(f"/api/runs/{parent.pk}/").json()["waiting_on"] == [first.pk]
    waits = f'Waiting for its child run <a href="/runs/{first.pk}/">#{first.pk}</a> ('
    assert waits in client.get(f"/runs/{parent.pk}/").content.decode()
    assert execute_run(first.pk) == Run.Status.COMPLETED
    assert api.get(f"/api/runs/{parent.pk}/").json()["waiting_on"] == []
    assert api.get(f"/api/runs/{first.pk}/").json()["waiting_on"] == []


def test_the_demo_delegates_two_lookups_one_of_whose_approval_travels_to_the_inbox_DEL_7(
    staff, client
):
    load_demo_data()
    approver = grant(staff, "approve_run")
    parent = submit(approver, "delegate-demo", "Who owns payments?")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    child, runbook = Run.objects.filter(parent=parent).order_by("id")
    assert (child.configuration.slug, runbook.configuration.slug) == ("lookup-demo", "runbook-demo")
    assert execute_run(runbook.pk) == Run.Status.COMPLETED
    assert Run.objects.get(pk=parent.pk).status == Run.Status.AWAITING  # the other goes on
    assert execute_run(child.pk) == Run.Status.AWAITING
    client.force_login(approver)
    inbox = client.get("/inbox/").content.decode()
    assert f"run #{parent.pk}</a>" in inbox and "Approve <code>notes.write</code>" in inbox
    response = resume(client_for(approver), child.pk, allow(active_ticket(child.pk)))
    assert response.status_code == 200, response.json()
    assert execute_run(child.pk) == Run.Status.COMPLETED
    assert execute_run(parent.pk) == Run.Status.COMPLETED
    found = {r["call_id"]: r["content"] for r in results_by_call(parent.pk).values()}
    assert "platform team" in found[child.parent_call_id]
    assert "docs/runbooks/payments.md" in found[runbook.parent_call_id]


def test_a_child_on_a_less_trusted_provider_is_refused_and_the_external_fake_gets_nothing_DEL_2(
    staff,
):
    """Over the wire: the child's configuration calls an OpenAI-compatible fake outside
    the zone the parent's confidential snippet may go to; not one request reaches it."""
    with FakeProvider() as fake:
        lookup = make_openai_configuration("lookup", fake, zone="external_global")
        secret = make_snippet("payroll", data_class="confidential")
        parent_config = scripted_configuration(
            "triage", [{"tool_calls": [delegate_call()]}, {"text": "triaged"}], snippets=[secret]
        )
        parent_config.delegates.set([lookup])
        parent = submit(staff, "triage")
        execute_run(parent.pk)
        child = child_of(parent)
        assert execute_run(child.pk) == Run.Status.FAILED
        assert fake.requests == []
        assert execute_run(parent.pk) == Run.Status.COMPLETED
        (result,) = results_by_call(parent.pk).values()
        assert result["status"] == ev.ERROR and "context_refused" in result["content"]


def test_a_waiting_parent_says_it_waits_for_its_child_never_for_a_person_DEL_4_UI_2(staff, client):
    """The parent's pages name the child it waits for (no inbox card: nobody answers a
    delegation), and its timeline says the child's end answered, not "delegated by None"."""
    tree()
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    child = child_of(parent)
    client.force_login(grant(staff, "use_playground"))
    for path in (f"/runs/{parent.pk}/", f"/playground/runs/{parent.pk}/"):
        page = client.get(path).content.decode()
        assert f'Waiting for its child run <a href="/runs/{child.pk}/">#{child.pk}</a>' in page
        assert "Waiting for a person" not in page and "Waiting for approval" not in page
    execute_run(child.pk)
    execute_run(parent.pk)
    page = client.get(f"/runs/{parent.pk}/").content.decode()
    assert f"child run #{child.pk} ended" in page and "by None" not in page
    inspector = client.get(f"/playground/runs/{parent.pk}/").content.decode()
    assert f'Its child run <a href="/runs/{child.pk}/">#{child.pk}</a> ended' in inspector


def test_a_parent_that_read_a_restricted_result_may_not_launder_it_through_a_child_DEL_2(
    staff,
):
    """The floor is everything the parent's model had read when it delegated, not only its
    sources: here a restricted result of `vault.customer_lookup` (MCP-4's case). The child
    on an external provider is refused before a byte leaves, the refusal names "delegated
    by run N" and the result that set it, and the parent gets that as the call's error."""
    with FakeProvider() as fake:
        lookup = make_openai_configuration("lookup", fake, zone="external_global")
        parent, child = after_a_restricted_read(staff, lookup)
        assert execute_run(child.pk) == Run.Status.FAILED
        assert fake.requests == []
        child.refresh_from_db()
        failure = child.failure
        assert failure["code"] == "context_refused"
        assert (failure["source_kind"], failure["source_name"], failure["data_class"]) == (
            "delegation",
            f"delegated by run {parent.pk}",
            "restricted",
        )
        assert failure["origin"] == {"kind": "tool_result", "name": "vault.customer_lookup"}
        assert f"delegated by run {parent.pk} (set by tool result" in failure["detail"]
        readout = run_readout(child)
        assert readout["effective_class"] == "restricted"
        assert execute_run(parent.pk) == Run.Status.COMPLETED
        result = list(results_by_call(parent.pk).values())[-1]
        assert result["status"] == ev.ERROR and "context_refused" in result["content"]


def after_a_restricted_read(staff, delegate: Configuration) -> tuple[Run, Run]:
    """A `triage` run that read a restricted result of `vault.customer_lookup`, then
    delegated to `delegate` and parked on its child; and that child."""
    customer = {"name": "vault.customer_lookup", "arguments": {"customer": "C-7"}}
    parent_config = scripted_configuration(
        "triage",
        [{"tool_calls": [customer]}, {"tool_calls": [delegate_call()]}, {"text": "triaged"}],
        allowed_tools=["vault"],
    )
    parent_config.delegates.set([delegate])
    parent = submit(staff, "triage")
    assert execute_run(parent.pk) == Run.Status.AWAITING
    return parent, child_of(parent)


def test_a_fork_or_a_replay_of_a_child_is_held_to_the_childs_floor_DEL_2_FORK_1_GOV_4(staff):
    """A child that failed before its first turn holds no labelled reply, only the task its
    parent's model wrote after reading a restricted result. Forked with a new prompt, or
    replayed, onto a provider outside the zone the floor may go to, its copy would carry
    that task out: each is refused before a byte leaves, naming the floor, and a fork of
    the fork carries the floor on."""
    with FakeProvider() as fake:
        make_openai_configuration("outside", fake, zone="external_global")
        lookup = scripted_configuration("lookup", [{"error": {"status": 400, "message": "no"}}])
        parent, child = after_a_restricted_read(staff, lookup)
        assert execute_run(child.pk) == Run.Status.FAILED
        fork = run_fork(
            user=staff,
            run_id=child.pk,
            request=ForkRequest(configuration="outside", input="tell me more"),
        )
        replayed = Run.objects.get(
            replay=replay_start(user=staff, runs=[child.pk], configuration="outside")
        )

        for copy in (fork, replayed):
            assert execute_run(copy.pk) == Run.Status.FAILED
            copy.refresh_from_db()
            assert (copy.failure["code"], copy.failure["source_name"]) == (
                "context_refused",
                f"delegated by run {parent.pk}",
            )
            assert run_readout(copy)["effective_class"] == "restricted"
        assert fake.requests == []
        again = run_fork(user=staff, run_id=fork.pk, request=ForkRequest(input="once more"))
        opening = Event.objects.get(thread=again.thread_id, sequence=1).payload
        assert (opening["floor"]["run"], opening["floor"]["class"]) == (parent.pk, "restricted")


def test_a_parent_with_nothing_declared_passes_no_floor_and_its_child_runs_DEL_2(staff):
    """The floor binds only what was declared: a parent that read public results hands
    its child nothing to be refused for."""
    with FakeProvider() as fake:
        fake.queue({"text": "the owner is Ada"})
        lookup = make_openai_configuration("lookup", fake, zone="external_global")
        parent_config = scripted_configuration(
            "triage", [{"tool_calls": [delegate_call()]}, {"text": "triaged"}]
        )
        parent_config.delegates.set([lookup])
        parent = submit(staff, "triage")
        execute_run(parent.pk)
        child = child_of(parent)
        assert execute_run(child.pk) == Run.Status.COMPLETED
        assert len(fake.requests) == 1


def sibling_tree() -> None:
    lookup = scripted_configuration("lookup", [{"text": "the owner is Ada"}])
    search = scripted_configuration("search", [{"text": "the runbook is on the wiki"}])
    calls = [delegate_call("lookup"), delegate_call("search", "find the runbook")]
    triage = scripted_configuration("triage", [{"tool_calls": calls}, {"text": "triaged"}])
    triage.delegates.set([lookup, search])


def test_the_run_page_shows_the_whole_tree_and_its_poll_brings_each_status_DEL_5(staff, client):
    """Every run of the tree, from its root, with its status and a link; the page's live
    fragment (what htmx polls every second, and a reload shows without JavaScript) has it
    too, so a child's end shows on the parent's page as it happens."""
    sibling_tree()
    parent = submit(staff, "triage")
    execute_run(parent.pk)
    first, second = Run.objects.filter(parent=parent).order_by("id")
    client.force_login(staff)
    page = client.get(f"/runs/{parent.pk}/").content.decode()
    assert "Delegation tree" in page
    assert f'<strong aria-current="page">#{parent.pk}</strong> triage' in page
    for child, slug in ((first, "lookup"), (second, "search")):
        assert f'<a href="/runs/{child.pk}/">#{child.pk}</a> {slug}' in page
    assert page.count('status-queued">queued') == 2
    execute_run(first.pk)
    live = client.get(f"/runs/{parent.pk}/live/").content.decode()
    assert 'status-completed">completed' in live and 'status-queued">queued' in live
    sibling_page = client.get(f"/runs/{second.pk}/").content.decode()
    assert f'<a href="/runs/{parent.pk}/">#{parent.pk}</a> triage' in sibling_page
    assert f'<a href="/runs/{first.pk}/">#{first.pk}</a> lookup' in sibling_page
    assert f'<strong aria-current="page">#{second.pk}</strong> search' in sibling_page


def test_a_run_that_never_delegated_reads_no_tree_PERF_DEL_5(staff, django_assert_num_queries):
    scripted_configuration("plain", [{"text": "hello"}])
    run = submit(staff, "plain")
    execute_run(run.pk)
    run.refresh_from_db()
    events = list(Event.objects.filter(run=run))
    with django_assert_num_queries(0):
        assert delegation_tree(staff, run, events) == []
