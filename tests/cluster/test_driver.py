"""The per-process driver in-process (PERF-6, CLU-3): backpressure, what happens to a run
whose executor fails, and the bounded graceful stop."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.utils import timezone
from django_q.models import OrmQ

from agentruns.cluster import driver as driver_module
from agentruns.cluster.driver import Driver, warm_up
from agentruns.models import Run
from agentruns.runtime import loop as executor_module
from agentruns.store.records import Claim
from agentruns.store.transitions import claim
from tests.support.clusters import configuration, wait_for
from tests.support.concurrency import at_once
from tests.support.runs import submit_batch

pytestmark = pytest.mark.django_db(transaction=True)


class FakeExecutor:
    behaviour: Any = None

    def __init__(self, claim: Claim) -> None:
        self.claim = claim

    def drive(self) -> str:
        return str(type(self).behaviour(self.claim))


@pytest.fixture
def fake_executor(monkeypatch: pytest.MonkeyPatch) -> type[FakeExecutor]:
    monkeypatch.setattr(executor_module, "Executor", FakeExecutor)
    return FakeExecutor


def drive_one(driver: Driver) -> Run:
    (run,) = submit_batch(configuration("driven", [{"text": "done"}]))
    assert driver.reserve(timeout=1)
    claimed = claim(run.pk)
    assert claimed is not None
    driver.submit(claimed)
    wait_for(lambda: driver.busy == 0, timeout=10, what="the driver to finish")
    run.refresh_from_db()
    return run


def wake_queued(run: Run) -> bool:
    return OrmQ.objects.filter(pk=run.wake_queue_id).exists()


def test_driver_reserve_blocks_when_every_thread_is_busy(driver):
    assert driver.reserve(timeout=0.1) and driver.reserve(timeout=0.1)
    assert not driver.reserve(timeout=0.1)  # backpressure: the wake-up re-enqueues itself
    driver.unreserve()
    assert driver.reserve(timeout=0.1)
    driver.unreserve()
    driver.unreserve()


def test_driver_hands_back_a_run_on_database_trouble_without_spending_an_attempt(
    driver, fake_executor
):
    def fail(claimed: Claim) -> str:
        raise OperationalError("server closed the connection unexpectedly")

    fake_executor.behaviour = fail
    run = drive_one(driver)
    assert run.status == Run.Status.QUEUED and run.attempts == 0
    assert wake_queued(run)


def test_driver_abandons_a_run_whose_executor_breaks_so_a_reclaim_spends_an_attempt(
    driver, fake_executor
):
    def fail(claimed: Claim) -> str:
        raise RuntimeError("a bug")

    fake_executor.behaviour = fail
    run = drive_one(driver)
    assert run.status == Run.Status.RUNNING
    assert run.lease_expires_at is not None and run.lease_expires_at <= timezone.now()
    assert wake_queued(run)
    claimed = claim(run.pk)
    assert claimed is not None and claimed.reclaimed and claimed.attempts == 1


def test_driver_shutdown_asks_executors_to_release_and_waits(driver, fake_executor):
    seen = threading.Event()

    def wait_for_stop(claimed: Claim) -> str:
        seen.set()
        wait_for(lambda: claimed.signals.stop_requested, timeout=10, what="the stop request")
        return "released"

    fake_executor.behaviour = wait_for_stop
    (run,) = submit_batch(configuration("stopping", [{"text": "done"}]))
    assert driver.reserve(timeout=1)
    claimed = claim(run.pk)
    assert claimed is not None
    driver.submit(claimed)
    assert seen.wait(timeout=10)
    assert driver.shutdown(timeout=5) == 0
    assert driver.busy == 0
    assert not driver.reserve(timeout=0.1)  # a stopping driver takes nothing new


def test_clu1_the_heartbeat_claims_queued_and_expired_runs_without_a_wakeup(driver, fake_executor):
    """CLU-1, CLU-3: a worker whose q2 side receives nothing still takes work: its
    heartbeat claims a queued run and a run whose lease expired (a crash reclaim, which
    spends an attempt), and never a run under a live lease."""
    driven: list[tuple[int, int]] = []
    fake_executor.behaviour = lambda c: driven.append((c.lease.run_id, c.attempts))
    config = configuration("beaten", [{"text": "done"}])
    queued, crashed, live = submit_batch(config, 3)
    OrmQ.objects.all().delete()  # no wake-up will ever arrive
    for run in (crashed, live):
        assert claim(run.pk) is not None
    Run.objects.filter(pk=crashed.pk).update(lease_expires_at=timezone.now())

    driver.beat()

    wait_for(lambda: len(driven) == 2, timeout=10, what="the claimed runs to be driven")
    assert sorted(driven) == [(queued.pk, 0), (crashed.pk, 1)]
    assert Run.objects.get(pk=crashed.pk).attempts == 1
    assert Run.objects.get(pk=live.pk).epoch == 1


def test_clu3_queued_runs_claimed_before_the_connection_drops_are_driven_not_stranded(
    driver, fake_executor
):
    """CLU-3: a free thread's claim takes queued runs, then expired leases, in two
    statements that each commit. The connection dropping between them (a database restart)
    must not strand what the first took: those runs are driven at once, not left leased to
    no one until their lease lapses and a reclaim spends an attempt (CI saw one in 24)."""
    driven: list[tuple[int, int]] = []
    fake_executor.behaviour = lambda c: driven.append((c.lease.run_id, c.attempts))
    (run,) = submit_batch(configuration("dropped-between", [{"text": "done"}]))

    def drop_before_the_reclaims(execute, sql, params, many, context):
        if "lease_expires_at < now()" in sql:
            execute("SELECT pg_terminate_backend(pg_backend_pid())", None, many, context)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(drop_before_the_reclaims), pytest.raises(OperationalError):
        driver.claim_free()
    connection.close()

    wait_for(lambda: driven, timeout=10, what="the claimed run to be driven")
    assert driven == [(run.pk, 0)]
    wait_for(lambda: driver.busy == 0, timeout=10, what="the driver to finish")
    assert driver.reserve(timeout=0.1) and driver.reserve(timeout=0.1)  # no thread leaked
    driver.unreserve()
    driver.unreserve()


def _lose_the_reply(execute, sql, params, many, context):
    """The claim of queued runs commits, then the connection drops before its reply is
    read: the claimer sees only the error."""
    rows = execute(sql, params, many, context)
    if "status = 'queued' ORDER BY id LIMIT" in sql:
        execute("SELECT pg_terminate_backend(pg_backend_pid())", None, many, context)
    return rows


def test_clu3_runs_a_claim_took_before_its_reply_was_lost_are_adopted_not_reclaimed(
    driver, fake_executor
):
    """CLU-3: a claim that committed but whose reply was lost with the connection leaves
    its runs leased to this process and driven by none of its threads. The next claim
    adopts them under a new epoch, spending no attempt, instead of leaving them until the
    lease lapses and a reclaim spends one. A run another worker holds is left alone."""
    driven: list[tuple[int, int]] = []
    fake_executor.behaviour = lambda c: driven.append((c.lease.run_id, c.attempts))
    config = configuration("reply-lost", [{"text": "done"}])
    elsewhere, lost = submit_batch(config, 2)
    assert claim(elsewhere.pk, owner="another-host:1:1") is not None

    with connection.execute_wrapper(_lose_the_reply), pytest.raises(OperationalError):
        driver.claim_free()
    connection.close()
    run = Run.objects.get(pk=lost.pk)
    assert (run.status, run.epoch) == (Run.Status.RUNNING, 1)  # taken, yet driven by no one
    assert driven == []

    assert driver.claim_free() == 1

    wait_for(lambda: driven, timeout=10, what="the adopted run to be driven")
    assert driven == [(lost.pk, 0)]
    run = Run.objects.get(pk=lost.pk)
    assert (run.attempts, run.epoch) == (0, 2)
    assert Run.objects.get(pk=elsewhere.pk).epoch == 1
    wait_for(lambda: driver.busy == 0, timeout=10, what="the driver to finish")
    assert driver.claim_free() == 0  # adopted once; nothing left to adopt


def test_clu3_a_wake_up_claim_whose_reply_was_lost_is_adopted_by_the_next_claim(
    driver, fake_executor, monkeypatch
):
    """CLU-3: the same for the one-run claim a wake-up makes (a prepared statement of its
    own): the run is driven with its attempt unspent."""
    from agentruns.store import postgres

    driven: list[tuple[int, int]] = []
    fake_executor.behaviour = lambda c: driven.append((c.lease.run_id, c.attempts))
    (run,) = submit_batch(configuration("wake-reply-lost", [{"text": "done"}]))
    real = postgres.prepared_rows

    def reply_lost(sql: str, params: list[Any]) -> list[tuple]:
        rows = real(sql, params)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return rows

    monkeypatch.setattr(postgres, "prepared_rows", reply_lost)
    assert driver.reserve(timeout=1)
    with pytest.raises(OperationalError):
        driver.claim_reserved(run.pk)
    monkeypatch.setattr(postgres, "prepared_rows", real)
    connection.close()
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING

    driver.beat()

    wait_for(lambda: driven, timeout=10, what="the adopted run to be driven")
    assert driven == [(run.pk, 0)]
    assert Run.objects.get(pk=run.pk).attempts == 0
    wait_for(lambda: driver.busy == 0, timeout=10, what="the driver to finish")
    assert driver.reserve(timeout=0.1) and driver.reserve(timeout=0.1)  # no thread leaked
    driver.unreserve()
    driver.unreserve()


def test_clu3_a_hand_back_refused_by_a_restarting_database_is_retried_not_abandoned(
    driver, fake_executor, monkeypatch
):
    """CLU-3: a database that is restarting refuses the hand-back's first tries too (the
    executor's connection broke; so do the next few). The driver keeps trying within a
    lease, so the run goes back to `queued` with a wake-up and keeps its attempt, rather
    than waiting out its lease to be reclaimed as a crash."""
    from agentruns.cluster import driver as driver_module

    real = driver_module.enqueue_wake
    refusals = iter(range(3))

    def restarting(run_id: int) -> None:
        if next(refusals, None) is not None:
            raise OperationalError("the database system is starting up")
        real(run_id)

    monkeypatch.setattr(driver_module, "enqueue_wake", restarting)

    def fail(claimed: Claim) -> str:
        raise OperationalError("server closed the connection unexpectedly")

    fake_executor.behaviour = fail
    run = drive_one(driver)
    assert (run.status, run.attempts, run.lease_owner) == (Run.Status.QUEUED, 0, "")
    assert wake_queued(run)


def test_a_warmed_up_worker_leaves_what_it_built_out_of_the_collectors_full_passes():
    """PERF-1, PERF-6: a full collection walked the whole of Django (~150k objects, ~100 ms)
    every few dozen runs; after warm-up it walks only what the runs left alive."""
    gc.unfreeze()
    try:
        warm_up()
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()


def test_perf6_a_warmed_up_worker_collects_young_objects_rarely():
    """PERF-6: runs in flight keep tens of thousands of young objects alive; at CPython's
    default the collector walked them every 700 allocations, holding the GIL (0.8 s of a
    1000-run batch). A warmed-up worker lets 20,000 allocations pass without a collection."""
    before = gc.get_threshold()
    passes: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            passes.append(info["generation"])

    try:
        warm_up()
        gc.collect()
        gc.callbacks.append(count)
        young = [[index] for index in range(20_000)]
        assert len(young) == 20_000 and passes == []
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*before)
        gc.unfreeze()


def test_perf6_runs_starting_together_build_their_configuration_once(monkeypatch):
    """A burst of runs of one configuration starts at once: the first thread to miss the
    cache builds the runtime configuration; the others wait for it instead of each building
    it again."""
    from agentruns.runtime import config as runtime_config_module

    configuration_id = configuration("burst", [{"text": "done"}]).pk
    built = []
    build = runtime_config_module.build_runtime_config

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(threading.get_ident())
        return build(*args, **kwargs)

    monkeypatch.setattr(runtime_config_module, "build_runtime_config", counted)
    found = at_once(8, lambda: runtime_config_module.runtime_config(configuration_id, 0))
    assert len(found) == 8 and len(built) == 1
    assert all(config is found[0] for config in found)


def test_clu2_a_run_that_ends_during_the_heartbeat_is_not_reported_lost(
    driver, monkeypatch, caplog
):
    """The heartbeat's renewal skips a run that is no longer running; one that ended while
    the statement ran (its executor let go of it just after) has not lost its lease, and
    the log must not say so. One whose epoch moved on while still held has."""
    ended, taken = submit_batch(configuration("beaten", [{"text": "done"}]), 2)
    ended_claim, taken_claim = claim(ended.pk), claim(taken.pk)
    assert ended_claim is not None and taken_claim is not None
    for held in (ended_claim, taken_claim):
        driver.held[(held.lease.run_id, held.lease.epoch)] = held
    Run.objects.filter(pk=ended.pk).update(status=Run.Status.COMPLETED)
    Run.objects.filter(pk=taken.pk).update(epoch=taken_claim.lease.epoch + 1)
    real = driver_module.renew_many

    def executor_lets_go(claims: list[Claim]) -> None:
        real(claims)
        driver.held.pop((ended.pk, ended_claim.lease.epoch))

    monkeypatch.setattr(driver_module, "renew_many", executor_lets_go)
    with caplog.at_level("WARNING", logger=driver_module.__name__):
        driver.beat()

    assert ended_claim.signals.lost and taken_claim.signals.lost
    (line,) = [r.getMessage() for r in caplog.records if "leases lost" in r.getMessage()]
    assert str([taken.pk]) in line
    driver.held.clear()
