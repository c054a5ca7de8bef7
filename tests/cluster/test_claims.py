"""CLU-2, CLU-3, HITL-7, HITL-11 without cluster processes: concurrent claims on separate
connections, the heartbeat's one-statement renewal, the sweeper's decisions, and what an
operator sees (`cluster_status`, the admin page)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import random
import threading
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.db import connection, transaction
from django.urls import NoReverseMatch, clear_url_caches, reverse
from django.utils import timezone
from django_q.models import OrmQ

from agentruns.bench import workload
from agentruns.cluster import sweeper
from agentruns.cluster.admin import ClusterQueueAdmin
from agentruns.cluster.status import snapshot
from agentruns.models import Run, Ticket
from agentruns.services.resume import run_resume
from agentruns.store import store
from agentruns.store.transitions import claim, claim_queued, renew_many
from tests.support.clusters import configuration
from tests.support.runs import submit_batch

pytestmark = pytest.mark.django_db(transaction=True)


def quick_config(slug: str = "quick"):
    return configuration(slug, [{"text": "done"}])


def expire(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def queued_rows() -> set[int]:
    return set(OrmQ.objects.values_list("id", flat=True))


def test_clu2_concurrent_claims_receive_different_runs():
    runs = submit_batch(quick_config(), 24)
    ids = [run.pk for run in runs]
    workers = 4
    barrier = threading.Barrier(workers)
    got: dict[int, list[int]] = {i: [] for i in range(workers)}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        order = ids[:]
        random.Random(i).shuffle(order)
        try:
            barrier.wait(timeout=10)
            for pk in order:
                lease = claim(pk, owner=f"worker-{i}")
                if lease is not None:
                    got[i].append(pk)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    claimed = [pk for pks in got.values() for pk in pks]
    assert sorted(claimed) == sorted(ids)  # each run claimed exactly once
    owners = dict(Run.objects.filter(pk__in=ids).values_list("pk", "lease_owner"))
    for i, pks in got.items():
        assert all(owners[pk] == f"worker-{i}" for pk in pks)
    assert set(Run.objects.filter(pk__in=ids).values_list("epoch", flat=True)) == {1}


def test_clu2_claim_skips_a_locked_run_instead_of_waiting():
    (run,) = submit_batch(quick_config())
    locked, done = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=run.pk)
                locked.set()
                done.wait(timeout=10)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        started = time.monotonic()
        assert claim(run.pk) is None
        assert time.monotonic() - started < 1.0
    finally:
        done.set()
        holder.join()
    assert claim(run.pk) is not None


def test_clu2_batch_claims_take_queued_runs_oldest_first_and_never_a_live_lease():
    """PERF-6: a worker with free threads claims a burst of queued runs in one statement;
    it never takes a running run, even one whose lease expired (only a wake-up or the
    sweeper reclaims, spending an attempt), and never the same run twice."""
    runs = submit_batch(quick_config(), 5)
    running = claim(runs[0].pk)
    expired = claim(runs[1].pk)
    assert running and expired
    expire(runs[1])
    first = claim_queued(2, owner="batch")
    assert [c.lease.run_id for c in first] == [runs[2].pk, runs[3].pk]
    assert all(c.lease.epoch == 1 and not c.reclaimed for c in first)
    rest = claim_queued(10, owner="batch")
    assert [c.lease.run_id for c in rest] == [runs[4].pk]
    assert claim_queued(10) == []
    owners = dict(Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("pk", "lease_owner"))
    assert [owners[r.pk] for r in runs[2:]] == ["batch"] * 3
    assert Run.objects.get(pk=runs[1].pk).attempts == 0


def test_perf6_a_claim_deletes_the_waiting_wake_ups_of_the_runs_it_took():
    """CLU-1, PERF-6: a run a batch claim took needs no wake-up, so the claim deletes its
    waiting one in the same statement; the runs it left queued keep theirs."""
    runs = submit_batch(quick_config(), 4)
    rows = {run.pk: Run.objects.get(pk=run.pk).wake_queue_id for run in runs}
    assert set(rows.values()) == queued_rows()
    taken = claim_queued(2, owner="batch")
    assert [c.lease.run_id for c in taken] == [runs[0].pk, runs[1].pk]
    assert queued_rows() == {rows[runs[2].pk], rows[runs[3].pk]}
    assert claim(runs[2].pk) is not None
    assert queued_rows() == {rows[runs[3].pk]}
    waiting = Run.objects.filter(pk__in=rows).values_list("pk", "wake_queue_id")
    assert dict(waiting) == {**dict.fromkeys(rows), runs[3].pk: rows[runs[3].pk]}


def test_perf4_a_claim_reads_each_runs_own_log_so_the_executor_reads_nothing_more():
    """PERF-4: the claim statement hands the executor the log and the newest checkpoint, as
    `read_log` reads them, for each run it takes (a resumed run's history among others)."""
    user = workload.bench_user()
    parked = workload.submit(workload.configuration("claim-log", 2, 1, park=True), user)
    assert workload.execute(parked) == Run.Status.AWAITING
    ticket = Ticket.objects.get(run_id=parked, status=Ticket.Status.ACTIVE)
    run_resume(user=user, run_id=parked, command=workload.allow_as_shown(ticket))
    fresh = submit_batch(quick_config(), 2)
    claims = claim_queued(10, owner="batch")
    assert sorted(c.lease.run_id for c in claims) == sorted([parked, *(r.pk for r in fresh)])
    for taken in claims:
        assert taken.log == store().read_log(taken.lease.thread_id, taken.lease.run_id)
    resumed = next(c for c in claims if c.lease.run_id == parked)
    events, checkpoint = resumed.log
    assert len(events) > 5 and {run_id for *_, run_id in events} == {parked}
    assert checkpoint is not None and checkpoint["last_sequence"] <= events[-1][0]


def test_perf1_a_runs_claim_by_id_is_prepared_once_and_says_what_a_batch_claim_says():
    """PERF-1: the claim that starts every drive is parsed and planned once per session
    (its backend spent ~1.2 ms a run on both before), and hands over what the batch claim
    does: the lease, whether the run's forced sources were composed, its log."""
    user = workload.bench_user()
    resumed = workload.submit(workload.configuration("claim-once", 2, 1, park=True), user)
    assert workload.execute(resumed) == Run.Status.AWAITING
    ticket = Ticket.objects.get(run_id=resumed, status=Ticket.Status.ACTIVE)
    run_resume(user=user, run_id=resumed, command=workload.allow_as_shown(ticket))
    Run.objects.filter(pk=resumed).update(composed_at=timezone.now())
    fresh = [run.pk for run in submit_batch(quick_config(), 3)]
    before = claim_plans()  # the drive above claimed its run in this session too
    one_by_one = {run_id: claim(run_id, owner="one") for run_id in [resumed, *fresh[:2]]}
    assert claim_plans() == [(before[0][0] + 3, 0)]
    (batched,) = claim_queued(10, owner="batch")
    assert batched.lease.run_id == fresh[2] and not batched.composed
    assert batched.log == store().read_log(batched.lease.thread_id, fresh[2])
    assert [one_by_one[r].composed for r in (resumed, *fresh[:2])] == [True, False, False]
    for run_id, taken in one_by_one.items():
        assert taken is not None and taken.lease.epoch == Run.objects.get(pk=run_id).epoch
        assert taken.log == store().read_log(taken.lease.thread_id, run_id)
    assert len(one_by_one[resumed].log[0]) > 5


def claim_plans() -> list[tuple[int, int]]:
    """(generic, custom) plans of each claim-by-id statement this session prepared."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH claimed AS%%'"
        )
        return cursor.fetchall()


def test_clu2_heartbeat_renews_held_leases_and_marks_lost_ones():
    runs = submit_batch(quick_config(), 3)
    claims = [claim(run.pk) for run in runs]
    kept, taken, cancelled = (c for c in claims if c is not None)
    expire(runs[1])
    assert claim(runs[1].pk) is not None  # another worker reclaims: epoch moves on
    Run.objects.filter(pk=runs[2].pk).update(cancel_requested=True)
    # Renewal must move the expiry forward from where it stands, on the database clock.
    before = timezone.now() - timedelta(seconds=5)
    Run.objects.filter(pk=runs[0].pk).update(lease_expires_at=before)
    renew_many([kept, taken, cancelled])
    assert not kept.signals.lost and not kept.signals.cancel_requested
    after = Run.objects.get(pk=runs[0].pk).lease_expires_at
    assert after is not None and after > before
    assert taken.signals.lost
    assert cancelled.signals.cancel_requested and not cancelled.signals.lost


def test_clu2_a_claims_lease_never_changes_and_its_signals_cross_threads():
    """CLU-2: what fences a worker's writes is fixed at the claim; what other threads tell
    its executor (the heartbeat: lost, cancel; the driver: stop) arrives through the
    claim's signals, which only ever go from clear to set."""
    (run,) = submit_batch(quick_config())
    claimed = claim(run.pk)
    assert claimed is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        claimed.lease.epoch += 1
    signals = claimed.signals
    assert not (signals.lost or signals.cancel_requested or signals.stop_requested)
    heartbeat = threading.Thread(target=lambda: (signals.request_stop(), signals.lose()))
    heartbeat.start()
    heartbeat.join()
    assert signals.stop_requested and signals.lost and not signals.cancel_requested
    expire(run)
    assert claim(run.pk) is not None
    renew_many([claimed])  # a renewal of a lost lease does not clear anything
    assert signals.lost and signals.stop_requested


def test_clu3_sweeper_reenqueues_expired_leases_once():
    (run,) = submit_batch(quick_config())
    OrmQ.objects.all().delete()
    assert claim(run.pk) is not None
    assert sweeper.sweep().expired_leases == []  # a live lease is left alone
    expire(run)
    report = sweeper.sweep()
    assert report.expired_leases == [run.pk]
    run.refresh_from_db()
    assert run.wake_queue_id in queued_rows()
    assert sweeper.sweep().expired_leases == []  # its wake-up is live now: not twice
    claimed = claim(run.pk)
    assert claimed is not None and claimed.reclaimed and claimed.attempts == 1


def test_clu3_sweeper_finds_lost_wakeups_and_leaves_live_ones():
    lost, _live = submit_batch(quick_config(), 2)
    Run.objects.update(wake_enqueued_at=timezone.now() - timedelta(seconds=5))
    lost_row = Run.objects.get(pk=lost.pk).wake_queue_id
    OrmQ.objects.filter(pk=lost_row).delete()
    report = sweeper.sweep()
    assert report.lost_wakeups == [lost.pk]
    lost.refresh_from_db()
    assert lost.wake_queue_id != lost_row and lost.wake_queue_id in queued_rows()
    Run.objects.update(wake_enqueued_at=timezone.now() - timedelta(seconds=5))
    assert sweeper.sweep().lost_wakeups == []


def test_clu3_wakeup_taken_by_a_dead_cluster_counts_as_lost(settings):
    (run,) = submit_batch(quick_config())
    Run.objects.update(wake_enqueued_at=timezone.now() - timedelta(seconds=5))
    timeout, retry = settings.Q_CLUSTER["timeout"], settings.Q_CLUSTER["retry"]
    # Taken just now by some cluster: still live.
    OrmQ.objects.update(lock=timezone.now() + timedelta(seconds=retry))
    assert sweeper.sweep().lost_wakeups == []
    # Taken longer ago than q2's timeout and the run is still queued: that cluster died.
    taken_at = timezone.now() - timedelta(seconds=timeout + 1)
    OrmQ.objects.update(lock=taken_at + timedelta(seconds=retry))
    assert sweeper.sweep().lost_wakeups == [run.pk]


def test_hitl7_sweeper_expires_due_tickets():
    config = configuration(
        "expiring",
        [{"tool_calls": [{"name": "notes.write", "arguments": {"title": "t", "body": "b"}}]}],
        allowed=["notes"],
    )
    (run,) = submit_batch(config)
    from agentruns.runtime.loop import execute_run

    assert execute_run(run.pk) == "awaiting"
    Ticket.objects.filter(run=run).update(deadline=timezone.now() - timedelta(seconds=1))
    report = sweeper.sweep()
    assert report.tickets_expired == 1
    assert Ticket.objects.get(run=run).status == Ticket.Status.EXPIRED
    assert Run.objects.get(pk=run.pk).status == Run.Status.QUEUED


def test_cluster_status_reports_queue_runs_and_stuck():
    runs = submit_batch(quick_config(), 3)
    assert claim(runs[0].pk) is not None
    expire(runs[0])
    Run.objects.filter(pk=runs[1].pk).update(wake_enqueued_at=timezone.now() - timedelta(seconds=5))
    OrmQ.objects.filter(pk=Run.objects.get(pk=runs[1].pk).wake_queue_id).delete()
    snap = snapshot()
    assert snap.runs_by_status["queued"] == 2 and snap.running == 1
    assert snap.queue_waiting == 1  # runs[2]'s: the claim took runs[0]'s wake-up
    assert snap.expired_leases == [runs[0].pk]
    assert snap.lost_wakeups == [runs[1].pk]
    assert snap.stuck == 2
    assert snap.oldest_lease is not None and snap.oldest_lease.run_id == runs[0].pk

    out = StringIO()
    call_command("cluster_status", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["stuck"] == 2 and data["runs_by_status"]["running"] == 1
    out = StringIO()
    call_command("cluster_status", stdout=out)
    assert "expired leases" in out.getvalue() and str(runs[0].pk) in out.getvalue()


def test_cluster_admin_page_is_read_only_and_shows_the_summary(client, django_user_model):
    assert isinstance(admin.site._registry[OrmQ], ClusterQueueAdmin)
    try:
        reverse("admin:agentruns_cluster_status")
    except NoReverseMatch:  # the URLconf was built before agentruns.cluster.admin loaded
        import config.urls

        importlib.reload(config.urls)
        clear_url_caches()
    submit_batch(quick_config(), 2)
    user = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(user)
    page = client.get(reverse("admin:agentruns_cluster_status"))
    assert page.status_code == 200
    assert b"Execution cluster" in page.content and b"lost wake-ups" in page.content
    listing = client.get(reverse("admin:django_q_ormq_changelist"))
    assert listing.status_code == 200
    assert b"Execution cluster" in listing.content and b"2 waiting" in listing.content
    staff = django_user_model.objects.create_user("staff2", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse("admin:agentruns_cluster_status")).status_code == 403
