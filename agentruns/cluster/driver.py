"""The per-process executor driver (PERF-6, CLU-2).

A django-q2 worker process runs one wake-up at a time. Runs are I/O-bound (they wait on a
provider for about a second per turn), so one run per process would need hundreds of
processes and hundreds of database connections. Instead a wake-up only claims the run (a
short transaction) and hands `Executor(claim).drive()` to this process's DRIVER:

- a pool of up to `AGENTRUNS_EXECUTOR_THREADS` daemon threads, one run each at a time;
- Django's native psycopg pool for this process (`AGENTRUNS_DB_POOL_MAX` connections, shared
  by all its threads; the executor hands its connection back before every provider call and
  tool, `agentruns.store.connection.release_connection`);
- one heartbeat thread that renews every lease the process holds in ONE statement every
  lease/3, marks leases it could not renew as lost (their executors stop without writing
  at their next boundary), refreshes the cancel flags (HITL-11), claims queued and
  lease-expired runs for its free threads straight from the database (so no stalled q2
  queue can stall the process, CLU-1), and runs the sweeper opportunistically, so
  recovery never waits for q2's once-a-minute schedule;
- one listener thread on a connection of its own, LISTENing for the wake-ups' notification
  (`store.wakeups.wake_notices`): when a transaction that enqueued wake-ups commits (a
  submission, an approval), the process claims queued runs for its free threads at once,
  so an approved call starts within milliseconds instead of at q2's next poll (PERF-5);
- graceful shutdown: when the q2 worker leaves its loop, a `multiprocessing` finaliser asks
  every executor to release its run at the next step boundary (back to `queued` with a new
  wake-up, no attempt spent) and waits a bounded time for them.

Backpressure: `reserve()` blocks a wake-up while every thread is busy; the wake-up gives up
after about half of q2's task timeout and re-enqueues itself (see `tasks.wake`).
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from multiprocessing import util as mp_util
from typing import TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, transaction
from psycopg_pool import PoolTimeout

from agentruns.cluster.sweeper import sweep
from agentruns.store.connection import (
    close_thread_connections,
    detach_inherited_connections,
    use_pool,
)
from agentruns.store.records import Claim, Lease
from agentruns.store.transitions import (
    claim,
    claim_expired,
    claim_owner,
    claim_queued,
    claim_unanswered,
    lease_lapse,
    renew_many,
    run_hand_back,
)
from agentruns.store.wakeups import enqueue_wake, wake_notices

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that say "not now" rather than "this run is broken".
TRANSIENT = (OperationalError, InterfaceError, PoolTimeout)
# ...unless the same run keeps hitting them in this process: then it is treated as broken.
MAX_HAND_BACKS = 3

# Runs one claim statement takes at most, on a wake-up or a heartbeat. Since a claim deletes
# the wake-ups of the runs it takes, a burst's runs are claimed by a few dozen wake-ups, each
# waiting for the GIL behind every thread it already started: 64 a claim got 1000 in flight
# started sooner than 16 did (median 62 % of ideal against 45 %, six alternating pairs), 128
# no sooner than 64.
CLAIM_BATCH = 64

# Allocations between two collections of the youngest generation (CPython's default: 700).
# Hundreds of runs in flight keep tens of thousands of young objects alive, and at 700 the
# collector walked them ~150 times a batch, holding the GIL: 0.8 s of a 1000-run batch's
# ~7 s of worker CPU. At 50,000 it walks them twice (0.2 s); the few reference cycles a
# run leaves (~7) wait a little longer to be freed.
GC_YOUNG_THRESHOLD = 50_000

# Finalisers run in descending priority; ours runs before multiprocessing's own (0).
SHUTDOWN_PRIORITY = 100

# How long a shutdown waits for its idle threads to exit, past its deadline for the runs.
JOIN_SECONDS = 5.0


@dataclass(frozen=True)
class DriverConfig:
    threads: int
    pool_max: int
    pool_timeout: float
    lease_seconds: float
    sweep_seconds: float
    shutdown_seconds: float
    listen: bool = False

    @classmethod
    def from_settings(cls) -> DriverConfig:
        lease = float(settings.AGENTRUNS_LEASE_SECONDS)
        sweep = float(getattr(settings, "AGENTRUNS_SWEEP_SECONDS", 0) or lease / 3)
        return cls(
            threads=max(1, int(settings.AGENTRUNS_EXECUTOR_THREADS)),
            pool_max=max(2, int(settings.AGENTRUNS_DB_POOL_MAX)),
            pool_timeout=float(getattr(settings, "AGENTRUNS_DB_POOL_TIMEOUT", 30.0)),
            lease_seconds=lease,
            sweep_seconds=sweep,
            shutdown_seconds=float(getattr(settings, "AGENTRUNS_SHUTDOWN_SECONDS", 20.0)),
            listen=bool(getattr(settings, "AGENTRUNS_WAKE_LISTEN", True)),
        )


def warm_up() -> None:
    """Pay a process's one-time costs before it takes work: otherwise the first runs pay
    them on their critical path, and racing threads pay them several times over (the
    token encoder's table takes ~0.3 s of CPU to load)."""
    try:
        import agentruns.runtime.loop  # noqa: F401  (the runtime's imports)
        from agentruns.providers.tokens import count

        count("warm-up")
        connections["default"].ensure_connection()  # opens this process's pool
    except Exception:
        logger.debug("warm-up incomplete", exc_info=True)
    finally:
        close_thread_connections()
    # What the process built so far (Django, the catalog, the encoder: ~150k objects) lives
    # as long as it does: the collector's full passes need not walk it again. Each pass
    # over it cost ~100 ms, ~2.5 ms per reference run on average.
    gc.freeze()
    _, *older = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *older)


@dataclass
class Driver:
    config: DriverConfig
    pid: int = field(default_factory=os.getpid)
    # By (run, epoch): a run this process lost and then reclaimed is two leases.
    held: dict[tuple[int, int], Claim] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.config.threads)
        self._jobs: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._stop = threading.Event()
        self._shutting_down = False
        self._last_sweep = 0.0
        self._hand_backs: dict[int, int] = {}
        # Owners of claim statements that failed on a dropped connection (`_claim`).
        self._unanswered: set[str] = set()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_loop, name="agentruns-heartbeat", daemon=True
        )
        self._heartbeat.start()
        self._listener: threading.Thread | None = None
        if self.config.listen:
            self._listener = threading.Thread(
                target=self._listen_loop, name="agentruns-listener", daemon=True
            )
            self._listener.start()

    # ---- the wake-up's side -------------------------------------------------------------

    def reserve(self, timeout: float) -> bool:
        """Take a thread for a run about to be claimed; False when none freed in time."""
        if self._shutting_down:
            return False
        return self._slots.acquire(timeout=max(0.0, timeout))

    def try_reserve(self) -> bool:
        """A free thread now, or False; never waits."""
        return not self._shutting_down and self._slots.acquire(blocking=False)

    def unreserve(self) -> None:
        self._slots.release()

    def submit(self, claim: Claim) -> None:
        """Drive a claimed run on a thread reserved with `reserve()`."""
        with self._lock:
            self.held[(claim.lease.run_id, claim.lease.epoch)] = claim
            if self._idle == 0 and len(self._threads) < self.config.threads:
                thread = threading.Thread(
                    target=self._work, name=f"agentruns-executor-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                self._idle += 1
                thread.start()
            self._idle -= 1
        self._jobs.put(claim)

    def claim_reserved(self, run_id: int) -> bool:
        """Claim the run on a thread reserved with `reserve()` and drive it; False, the
        thread given back, if it was not claimable."""
        try:
            taken = self._claim(partial(claim, run_id))
        except BaseException:
            self.unreserve()
            raise
        if taken is None:
            self.unreserve()
            return False
        self.submit(taken)
        return True

    def claim_free(self, limit: int = CLAIM_BATCH) -> int:
        """Claim up to `limit` runnable runs straight from the database, one per free
        thread, and drive them; returns how many (CLU-1: the run row, not a wake-up,
        decides; their own wake-ups arrive later and find nothing to do)."""
        reserved = 0
        while reserved < limit and self.try_reserve():
            reserved += 1
        claims: list[Claim] = []
        try:
            # What unanswered claims took, then queued runs, then expired leases
            # (reclaims). Each statement commits on its own, so what one took must be
            # driven even if the next fails: otherwise those runs sit leased to no one
            # until the lease lapses, and the reclaim spends an attempt a dropped
            # connection never should (CLU-3).
            takes: list[Callable[[int, str], list[Claim]]] = [claim_queued, claim_expired]
            if self._unanswered:
                takes.insert(0, self._adopt)
            for take in takes:
                claims += self._claim(partial(take, reserved - len(claims)))
        finally:
            for taken in claims:
                self.submit(taken)
            for _ in range(reserved - len(claims)):
                self.unreserve()
        return len(claims)

    def _claim(self, statement: Callable[[str], T]) -> T:
        """One claim statement, under an owner of its own. A dropped connection may have
        taken its reply after it committed: the runs it took would then be leased to this
        process but driven by none of its threads. Its owner is remembered, and the next
        claim adopts them (`_adopt`)."""
        owner = claim_owner()
        try:
            return statement(owner)
        except TRANSIENT:
            with self._lock:
                self._unanswered.add(owner)
            raise

    def _adopt(self, limit: int, owner: str) -> list[Claim]:
        """Take what unanswered claims left leased to this process, spending no attempt
        (no worker crashed; CLU-3). An owner is forgotten once a statement found all it
        had left."""
        with self._lock:
            owners = sorted(self._unanswered)
        adopted = claim_unanswered(owners, limit, owner)
        if adopted:
            logger.warning(
                "adopted runs %s: their claim's reply was lost", [c.lease.run_id for c in adopted]
            )
        if len(adopted) < limit:
            with self._lock:
                self._unanswered.difference_update(owners)
        return adopted

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self.held)

    # ---- executor threads ---------------------------------------------------------------

    def _work(self) -> None:
        from agentruns.runtime.loop import Executor, Outcome

        while True:
            claim = self._jobs.get()
            if claim is None:
                return
            lease = claim.lease
            try:
                outcome = Executor(claim).drive()
                if outcome == Outcome.FENCED:
                    logger.info("run %s: lease taken over; stopped without writing", lease.run_id)
                else:
                    logger.debug("run %s: %s", lease.run_id, outcome)
            except TRANSIENT as exc:
                self._hand_backs[lease.run_id] = self._hand_backs.get(lease.run_id, 0) + 1
                if self._hand_backs[lease.run_id] > MAX_HAND_BACKS:
                    logger.exception("run %s: keeps failing; abandoning the lease", lease.run_id)
                    self._abandon(lease)
                else:
                    logger.warning("run %s: database trouble (%s); handed back", lease.run_id, exc)
                    self._hand_back(lease)
            except Exception:
                logger.exception("run %s: the executor failed; abandoning the lease", lease.run_id)
                self._abandon(lease)
            finally:
                close_thread_connections()
                with self._lock:
                    self.held.pop((lease.run_id, lease.epoch), None)
                    self._idle += 1
                    self._released.notify_all()
                self._slots.release()

    def _hand_back(self, lease: Lease) -> None:
        """Overload or a database hiccup is not a crash: put the run back to queued with a
        wake-up, as a graceful stop does, spending no attempt. A restarting database may
        refuse the first tries (and the pool may still hold connections it broke), so
        this retries for up to a lease; if it never succeeds, the lease expires and the
        sweeper reclaims the run (spending one)."""
        deadline = time.monotonic() + self.config.lease_seconds
        pause = 0.05
        while True:
            close_thread_connections()
            try:
                with transaction.atomic():
                    if run_hand_back(lease):
                        enqueue_wake(lease.run_id)
                return
            except TRANSIENT:
                if time.monotonic() + pause > deadline:
                    logger.exception("run %s: could not hand the run back", lease.run_id)
                    return
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
            except Exception:
                logger.exception("run %s: could not hand the run back", lease.run_id)
                return

    def _abandon(self, lease: Lease) -> None:
        """A run this worker cannot go on with (an unexpected error): its lease lapses now
        instead of at expiry, so the sweeper reclaims it at once; like a crash, that
        reclaim spends an attempt (CLU-3), which bounds a run that keeps failing."""
        try:
            with transaction.atomic():
                if lease_lapse(lease):
                    enqueue_wake(lease.run_id)
        except Exception:
            # The heartbeat no longer renews it: the lease expires and the sweeper
            # re-enqueues the run.
            logger.exception("run %s: could not abandon the lease", lease.run_id)

    # ---- heartbeat and opportunistic sweeps ---------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = self.config.lease_seconds / 3
        while not self._stop.wait(interval):
            self.beat()

    def beat(self) -> None:
        try:
            with self._lock:
                claims = list(self.held.values())
            renew_many(claims)
            with self._lock:
                # A run that ended while the statement ran is not renewed either: only a
                # claim still held after it has really lost its lease (CLU-2).
                lost = [run_id for (run_id, _), held in self.held.items() if held.signals.lost]
            if lost:
                logger.warning("leases lost for runs %s; their executors stop", lost)
            # CLU-1: a worker whose q2 side stalled (a sibling SIGKILLed holding the task
            # queue's lock) still takes work; q2's wake-ups only make it start sooner.
            claimed = self.claim_free()
            if claimed:
                logger.info("heartbeat claimed %s runnable runs", claimed)
            now = time.monotonic()
            if not self._shutting_down and now - self._last_sweep >= self.config.sweep_seconds:
                self._last_sweep = now
                sweep()  # webhooks and mails are the outbox process's (SEC-8), never here
        except Exception:
            logger.exception("heartbeat failed")
        finally:
            close_thread_connections()

    def _listen_loop(self) -> None:
        for _ in wake_notices(self._stop):
            try:
                # One batch: the rest of a burst is claimed by its wake-ups, batch by batch,
                # as threads free up (starting a thousand runs at one instant was no faster).
                if not self._shutting_down:
                    self.claim_free()
            except Exception:
                logger.exception("claiming on a wake-up notification failed")
            finally:
                close_thread_connections()

    # ---- shutdown -------------------------------------------------------------------------

    def shutdown(self, timeout: float | None = None) -> int:
        """Ask every executor to release its run at its next step boundary and wait for
        them (bounded), then for the threads themselves, so nothing of this driver writes
        after it returns (a test's database flush would meet it). Returns how many runs
        were still held at the deadline; their leases expire and the sweeper reclaims them."""
        timeout = self.config.shutdown_seconds if timeout is None else timeout
        self._shutting_down = True
        deadline = time.monotonic() + timeout
        with self._lock:
            for claim in self.held.values():
                claim.signals.request_stop()
            while self.held and time.monotonic() < deadline:
                self._released.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            left = len(self.held)
        # The heartbeat first (it exits after the beat it is in), so no thread starts after
        # the executor threads are told to exit; a thread without a run exits at once.
        # Runs still held at the deadline are not waited for any longer.
        self._stop.set()
        if not left:
            deadline = max(deadline, time.monotonic() + JOIN_SECONDS)
        _join(self._heartbeat, deadline)
        if self._listener is not None:
            _join(self._listener, deadline)
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            _join(thread, deadline)
        if left:
            logger.warning("shutdown: %s runs still held; their leases will expire", left)
        return left


def _join(thread: threading.Thread, deadline: float) -> None:
    if thread is not threading.current_thread():
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


_driver: Driver | None = None
_driver_lock = threading.Lock()


def get_driver() -> Driver:
    """This process's driver, created (and the process switched to the pool) on first use."""
    global _driver
    with _driver_lock:
        if _driver is None or _driver.pid != os.getpid():
            config = DriverConfig.from_settings()
            detach_inherited_connections()
            pool = f"agentruns-{os.getpid()}"
            use_pool(size=config.pool_max, timeout=config.pool_timeout, name=pool)
            _driver = Driver(config)
            warm_up()
            mp_util.Finalize(None, _shutdown_on_exit, exitpriority=SHUTDOWN_PRIORITY)
        return _driver


def current_driver() -> Driver | None:
    return _driver if _driver is not None and _driver.pid == os.getpid() else None


def _shutdown_on_exit() -> None:
    driver = current_driver()
    if driver is not None:
        driver.shutdown()


def _after_fork_in_child() -> None:
    global _driver
    _driver = None


os.register_at_fork(after_in_child=_after_fork_in_child)
