"""SEC-6, CG-9: the gate fails closed. A decision counts only if it was taken on one stable,
current view of the configuration; while the catalog keeps moving under a run, nothing is
sent on a view no decision covered. Real concurrent writers: other threads, other
connections, committed catalog changes."""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from agentruns import events as ev
from agentruns.models import CatalogGeneration, Configuration, Event, GateAudit, Run, Snippet
from agentruns.runtime.loop import Executor, Outcome, execute_run
from agentruns.store.transitions import claim
from tests.support.catalog import make_provider, make_snippet
from tests.support.crash import (
    expire_lease,
    make_openai_configuration,
    provider_pairing_problems,
    submit,
)
from tests.support.deferred import is_summary, modes
from tests.support.fake_provider import FakeProvider
from tests.support.runs import prompt

pytestmark = pytest.mark.django_db(transaction=True)

CLOCK_TURN = {"tool_calls": [{"name": "clock_now", "arguments": {}}]}


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


class Bumper:
    """A writer on its own thread and connection that commits one catalog change each
    time it is asked, and answers only once the change is committed."""

    def __init__(self) -> None:
        self._asks: queue.SimpleQueue[threading.Event | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.bumps = 0

    def _serve(self) -> None:
        try:
            while (done := self._asks.get()) is not None:
                CatalogGeneration.bump()
                self.bumps += 1
                done.set()
        finally:
            connections.close_all()

    def bump(self) -> None:
        done = threading.Event()
        self._asks.put(done)
        assert done.wait(10), "the writer thread did not commit its change"

    def __enter__(self) -> Bumper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._asks.put(None)
        self._thread.join(10)


@contextmanager
def catalog_moves_whenever_the_configuration_is_read(bumper: Bumper) -> Iterator[None]:
    """Lock-step: every time the executor reads the configuration, the writer commits a
    catalog change before the executor's next statement, so the audit statement always
    finds the generation moved on."""
    table = Configuration._meta.db_table

    def hook(execute: Callable, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if f'FROM "{table}"' in sql:
            bumper.bump()
        return result

    with connection.execute_wrapper(hook):
        yield


def gated(fake: FakeProvider, data_class: str) -> Configuration:
    snippet = make_snippet("plans", data_class=data_class, text="PUBLIC-0")
    return make_openai_configuration(
        "gated", fake, zone="external_global", allowed_tools=["clock.now"], snippets=[snippet]
    )


@pytest.mark.parametrize("data_class", ["public", "secret"], ids=["permitted", "refused"])
def test_sec6_a_catalog_that_never_holds_still_sends_nothing_and_fails_the_run(
    staff, fake, data_class
):
    """SEC-6, CG-9: every decision is taken on a view the catalog has already left. The
    run must not fall out of its retries with a stale verdict (a send on a view nothing
    decided) or an unbound one: it fails `context_unstable` and nothing is sent."""
    gated(fake, data_class)
    fake.default = {"text": "must never be asked"}
    run = submit(staff, "gated")

    with Bumper() as bumper, catalog_moves_whenever_the_configuration_is_read(bumper):
        outcome = execute_run(run.pk)

    assert bumper.bumps >= 3
    assert outcome == Run.Status.FAILED
    run.refresh_from_db()
    assert run.failure["code"] == "context_unstable", run.failure
    assert "nothing was sent" in run.failure["detail"]
    assert fake.requests == []
    assert Event.objects.filter(run=run, type=ev.RUN_FAILED).count() == 1


def test_sec6_a_catalog_that_settles_lets_the_run_through_on_the_settled_view(staff, fake):
    """SEC-6: a couple of moves are retried, not failed: once the view holds still the
    run is decided on it, sends, and completes."""
    gated(fake, "public")
    fake.queue({"text": "done"})
    run = submit(staff, "gated")
    table = Configuration._meta.db_table
    moves = iter(range(2))

    def hook(execute: Callable, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if f'FROM "{table}"' in sql and next(moves, None) is not None:
            bumper.bump()
        return result

    with Bumper() as bumper, connection.execute_wrapper(hook):
        assert execute_run(run.pk) == Run.Status.COMPLETED

    assert bumper.bumps == 2
    assert len(fake.requests) == 1


# ---------------------------------------------------------------- a free-running writer


class Flipper(threading.Thread):
    """An operator (or a bulk admin action) editing the run's snippet over and over: each
    save is one committed change, alternating a public text and a secret one. A secret
    version may never reach the external provider, whatever the timing."""

    def __init__(self, snippet_id: int) -> None:
        super().__init__(daemon=True)
        self.snippet_id = snippet_id
        self.stop = threading.Event()
        # Set by the provider on each request: after a burst the writer rests on the public
        # version until a send went through (or 5 s), so a loaded machine, whose runs take
        # longer than the pause to compose and send, still leaves windows to send in.
        self.sent = threading.Event()
        self.saves = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        rng = random.Random(9)
        try:
            while not self.stop.is_set():
                for _ in range(rng.randint(2, 8)):  # a burst of changes...
                    self.saves += 1
                    secret = self.saves % 2 == 1
                    with transaction.atomic():
                        snippet = Snippet.objects.get(pk=self.snippet_id)
                        snippet.data_class = "secret" if secret else "public"
                        snippet.text = f"{'SECRET' if secret else 'PUBLIC'}-{self.saves}"
                        snippet.save()
                if self.saves % 2:
                    continue  # ...that never rests on the secret version
                self.stop.wait(rng.uniform(0.01, 0.06))  # ...then a pause: load, not timing
                self.sent.wait(5)
                self.sent.clear()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
        finally:
            connections.close_all()


def drive_in_threads(run_ids: list[int], threads: int) -> dict[int, Any]:
    """Each run executed by one of `threads` worker threads; outcome or exception."""
    outcomes: dict[int, Any] = {}
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for pk in run_ids:
        work.put(pk)

    def worker() -> None:
        try:
            while True:
                try:
                    pk = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    outcomes[pk] = execute_run(pk)
                except BaseException as exc:
                    outcomes[pk] = exc
        finally:
            connections.close_all()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(120)
    return outcomes


def sent_texts(request: Any) -> str:
    return " ".join(str(m.get("content")) for m in request.body.get("messages", []))


def test_sec6_every_send_under_a_concurrent_editor_was_covered_by_a_permitted_decision(staff, fake):
    """SEC-6, CG-9, LOOP-7 with a free-running writer: 16 runs of two turns each are gated
    on four threads while another thread keeps flipping their snippet between a public and
    a secret version (each flip a committed change). No request ever carries a secret
    version; every request follows a permitted decision for its run; every run ends —
    completed, refused, or failed closed — with its pairing intact."""
    snippet = make_snippet("plans", data_class="public", text="PUBLIC-0")
    make_openai_configuration(
        "edited", fake, zone="external_global", allowed_tools=["clock.now"], snippets=[snippet]
    )

    def reply(body: dict, path: str) -> dict:
        flipper.sent.set()
        answered = any(m.get("role") == "tool" for m in body["messages"])
        return {"text": "done"} if answered else CLOCK_TURN

    fake.default = reply
    runs = [submit(staff, "edited", f"run-{i}") for i in range(16)]

    flipper = Flipper(snippet.pk)
    flipper.start()
    try:
        outcomes = drive_in_threads([r.pk for r in runs], threads=4)
    finally:
        flipper.stop.set()
        flipper.sent.set()
        flipper.join(30)

    assert flipper.error is None, flipper.error
    assert flipper.saves > 20
    crashed = {pk: o for pk, o in outcomes.items() if isinstance(o, BaseException)}
    assert not crashed, crashed
    leaked = [sent_texts(r) for r in fake.requests if "SECRET" in sent_texts(r)]
    assert leaked == []
    assert fake.requests, "the writer left no window to send in; the test proves nothing"
    for run in runs:
        run.refresh_from_db()
        assert run.status in (Run.Status.COMPLETED, Run.Status.FAILED), run.status
        if run.status == Run.Status.FAILED:
            assert run.failure["code"] in ("context_refused", "context_unstable"), run.failure
        sends = sum(1 for r in fake.requests if _input_of(r) == run.input)
        permitted = GateAudit.objects.filter(run_id=run.pk, verdict="permitted").count()
        assert sends <= permitted, (run.pk, sends, permitted)
        assert provider_pairing_problems(run.pk) == []


def _input_of(request: Any) -> str:
    users = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
    return str(users[0].get("content")) if users else ""


# ---------------------------------------------------------------- the audit row itself


def test_sec6_clu2_a_fenced_worker_writes_no_audit_row_and_sends_nothing(staff, fake):
    """CG-4, CLU-2: the audit row that justifies a send is fenced by the lease epoch. A
    worker whose lease was taken over (it has not noticed yet) reaches the gate: it writes
    no audit row, sends nothing and stops without writing."""
    gated(fake, "public")
    fake.default = {"text": "must never be asked"}
    run = submit(staff, "gated")
    stale = claim(run.pk)
    assert stale is not None
    expire_lease(run.pk)
    assert claim(run.pk) is not None  # another worker took it over

    assert Executor(stale).drive() == Outcome.FENCED

    assert not GateAudit.objects.filter(run_id=run.pk).exists()
    assert fake.requests == []
    assert not Event.objects.filter(run=run).exclude(type=ev.USER).exists()


def test_cg4_a_permitted_decision_is_committed_durably_before_its_send(staff, fake):
    """CG-4, SEC-6: the row that justifies a send waits for the WAL flush like any other
    decision (no `synchronous_commit = off` on it), so a database crash cannot keep the
    send and lose its justification."""
    gated(fake, "public")
    fake.queue({"text": "done"})
    run = submit(staff, "gated")

    with CaptureQueriesContext(connection) as queries:
        assert execute_run(run.pk) == Run.Status.COMPLETED

    audits = [q["sql"] for q in queries if f"INSERT INTO {GateAudit._meta.db_table}" in q["sql"]]
    assert audits
    assert not [sql for sql in audits if "synchronous_commit" in sql]
    assert GateAudit.objects.filter(run_id=run.pk, verdict="permitted").count() == 1


def test_sec6_a_catalog_that_moves_after_every_composition_fails_the_run_closed(
    staff, fake, monkeypatch
):
    """SEC-6: a request composed on a view the gate then finds outdated is composed again,
    as often as a decision is taken again; a catalog that moves after every composition
    fails the run `context_unstable` and nothing is sent."""
    from agentruns.runtime.actions import model_turn

    gated(fake, "public")
    compose = model_turn._composed

    def composed_then_moved(ctx):
        composed = compose(ctx)
        CatalogGeneration.bump()  # an operator's change lands right after composition
        return composed

    monkeypatch.setattr(model_turn, "_composed", composed_then_moved)
    run = submit(staff, "gated")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "context_unstable"
    assert fake.requests == []


def test_sec6_a_catalog_change_during_compaction_never_mixes_two_views_in_one_send(staff):
    """SEC-6, CG-9, DEF-6: while a turn compacts its context (the summary request is in
    flight), an operator re-points the configuration: a secret snippet, a local provider,
    another model — permitted as a whole. The turn's request must be decided and built on
    one view: never the new snippet's text sent down the old chain, which no decision
    covered."""
    snippet = make_snippet("plans", data_class="public", text="PUBLIC-TEXT")
    moved = []

    def repoint_while_summarising(body: dict, path: str) -> dict:
        if not is_summary(body):
            return {"text": "done"}
        if not moved:  # another thread and connection: the operator's
            try:
                with transaction.atomic():
                    snippet.data_class, snippet.text = "secret", "SECRET-TEXT"
                    snippet.save()
                    config.provider = make_provider(
                        "local-box", zone="local", kind="openai", base_url=fake.openai_base_url
                    )
                    config.model = "gpt-local"
                    config.save()
                moved.append(True)
            finally:
                connections.close_all()
        return {"text": "SUMMARY"}

    with FakeProvider(default=repoint_while_summarising) as fake:
        config = make_openai_configuration(
            "moving",
            fake,
            zone="external_global",
            allowed_tools=["clock.now"],
            modes=modes(agent=(["clock.now"], [])),
            context_budget_tokens=300,
            snippets=[snippet],
        )
        first = prompt(staff, "moving", " ".join(["hello"] * 100))
        second = submit(staff, "moving", " ".join(["hello"] * 150), thread=first.thread_id)

        assert execute_run(second.pk) == Run.Status.COMPLETED

    assert moved
    assert Event.objects.filter(run=second, type=ev.COMPACTION).exists()
    turns = [r for r in fake.requests if not is_summary(r.body)]
    views = {(r.body["model"], "SECRET-TEXT" in sent_texts(r)) for r in turns[1:]}
    assert views <= {("gpt-test", False), ("gpt-local", True)}, views
