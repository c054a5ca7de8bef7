"""What happens: threads, runs, their append-only log, checkpoints, invocations, tickets."""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from agentruns import events as ev
from agentruns.models.catalog import Configuration


# SEC-2: who sees a run. The rule lives here, below the tools that read application data
# (SEC-10: `notes.read` reads only what its run's initiator may see); `agentruns.policy`
# names it for everything above.
def sees_all_runs(user: Any) -> bool:
    """Holders of `view_all_runs` or `approve_run` see every run."""
    return bool(
        user is not None
        and user.is_authenticated
        and (user.has_perm("agentruns.view_all_runs") or user.has_perm("agentruns.approve_run"))
    )


def sees_own(user: Any, created_by_id: int | None) -> bool:
    return bool(user is not None and user.is_authenticated and created_by_id == user.pk)


class RunQuerySet(models.QuerySet["Run"]):
    def visible_to(self, user: Any) -> RunQuerySet:
        """The runs `user` started, or every run for those who see all; none for an
        anonymous visitor or a missing initiator (None)."""
        if sees_all_runs(user):
            return self
        if user is None or not user.is_authenticated:
            return self.none()
        return self.filter(created_by=user)


class ThreadQuerySet(models.QuerySet["Thread"]):
    def visible_to(self, user: Any) -> ThreadQuerySet:
        """A thread is visible iff one of its runs is."""
        return self.filter(runs__in=Run.objects.visible_to(user)).distinct()


class NoteQuerySet(models.QuerySet["Note"]):
    def visible_to(self, user: Any) -> NoteQuerySet:
        """A note is visible iff its run is (a note without a run is nobody's)."""
        return self.filter(run__in=Run.objects.visible_to(user))


class Thread(models.Model):
    """LOOP-1: a conversation. Its log is the authority on what happened (LOOP-3)."""

    configuration = models.ForeignKey(Configuration, on_delete=models.PROTECT)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ThreadQuerySet.as_manager()

    def __str__(self) -> str:
        return f"thread {self.pk}"


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        AWAITING = "awaiting"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    TERMINAL = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="runs")
    configuration = models.ForeignKey(Configuration, on_delete=models.PROTECT)
    input = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agent_runs",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # RG-1, RG-3: the forced set by id; NULL means a row written before these existed.
    forced_snippet_ids = models.JSONField(null=True, blank=True)
    forced_skill_ids = models.JSONField(null=True, blank=True)
    # FS-4: set once the forced set was composed (inactive and deleted sources dropped).
    composed_at = models.DateTimeField(null=True, blank=True)
    final_reply = models.TextField(blank=True)
    failure = models.JSONField(null=True, blank=True)
    # CLU-2: the lease. Every runtime write is fenced by `epoch`.
    epoch = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    # OPS-5: who asked, as the log names actors; the loop ending a running run at its next
    # step boundary writes it into `run.cancelled`.
    cancel_requested_by = models.CharField(max_length=150, blank=True)
    # CLU-1: the broker's queue row of the run's newest wake-up. On PostgreSQL a claim
    # deletes that row, so a run a batch claim took is not woken for nothing (PERF-6).
    wake_queue_id = models.BigIntegerField(null=True, blank=True)
    wake_enqueued_at = models.DateTimeField(null=True, blank=True)
    # CLU-5
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_digest = models.CharField(max_length=64, blank=True)
    # Caches of the log, refreshed when a run parks or ends (`turns`: model turns taken).
    turns = models.PositiveIntegerField(default=0)
    tool_calls_used = models.PositiveIntegerField(default=0)
    last_sequence = models.PositiveIntegerField(default=0)
    # FORK-1: the run this one was forked from and the sequence (in that run's thread) its
    # copy ends at; the `run.forked` event at the start of this run's log says the same.
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_at = models.PositiveIntegerField(null=True, blank=True)
    # GOV-2: the configuration's version when the run was created; each model turn records
    # the versions it was sent under in its `message.assistant` event.
    configuration_version = models.PositiveIntegerField(null=True, blank=True)
    # OPS-7: the W3C trace context of the run's first span and of its newest model turn, so
    # a parked run's trace goes on after resume; empty while tracing is off.
    trace_context = models.JSONField(null=True, blank=True)
    # SCHED-2, SCHED-4, SCHED-5: what started the run when no person did: {"kind":
    # "schedule", "id", "due"} or {"kind": "trigger", "slug"}; null for a person's run.
    trigger = models.JSONField(null=True, blank=True)
    # DEL-1, DEL-4: a child run's parent and the `agent.delegate` call that started it, and
    # the root of its tree (whose budget it spends, DEL-3); all empty for a root.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    parent_call_id = models.CharField(max_length=200, blank=True)
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # GOV-4: a replay's run and the run whose recorded task it re-runs; both empty for
    # every other run (no index of its own: only replays look them up, through the partial
    # index below).
    replay = models.ForeignKey(
        "agentruns.Replay",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="runs",
        db_index=False,
    )
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread"],
                condition=models.Q(status__in=["queued", "running", "awaiting"]),
                name="one_live_run_per_thread",
            ),
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="run_idempotency_key_once",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            # PERF-8: the run list, newest first, pages through this without sorting.
            models.Index(fields=["created_at", "id"], name="run_newest"),
            models.Index(
                fields=["replay"], condition=models.Q(replay__isnull=False), name="run_replay"
            ),
        ]
        permissions = [
            ("use_playground", "Can use the tool playground"),
            ("approve_run", "Can approve tool calls and answer questions of runs"),
            ("view_all_runs", "Can view every run"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL

    def is_visible_to(self, user: Any) -> bool:
        """SEC-2 for one run: the predicate of `RunQuerySet.visible_to`."""
        return sees_all_runs(user) or sees_own(user, self.created_by_id)


class Event(models.Model):
    """LOOP-3: append-only; the runtime never updates or deletes a row."""

    # The log's references carry no database constraint and no index of their own: every
    # index and every deferred foreign-key check (a row lock on the run at each commit) is
    # paid on every append. Integrity holds by construction: the runtime appends only
    # behind a lock on the run row (runtime/journal.py), services only behind the thread
    # row lock, and deletions cascade through Django.
    thread = models.ForeignKey(
        Thread,
        on_delete=models.CASCADE,
        related_name="events",
        db_index=False,
        db_constraint=False,
    )
    run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        db_index=False,
        db_constraint=False,
    )
    sequence = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["thread", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["thread", "sequence"], name="event_sequence_once")
        ]
        indexes = [
            models.Index(fields=["run", "sequence"], name="event_run_sequence"),
            # PERF-8, OPS-5: the audit export reads the few audited events by time; partial,
            # so the steps of the loop (none of them audited) never maintain it.
            models.Index(
                fields=["created_at", "id"],
                name="event_audit_time",
                condition=models.Q(type__in=ev.AUDITED),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}#{self.sequence} {self.type}"


class Checkpoint(models.Model):
    """LOOP-8, LOOP-9: a cache of the folded run state up to `last_sequence`; no history."""

    class Kind(models.TextChoices):
        MODEL_RESPONSE = "model_response"
        TOOL_PENDING = "tool_pending"
        TOOL_COMPLETED = "tool_completed"
        SUSPENSION = "suspension"
        TERMINAL = "terminal"

    run = models.ForeignKey(  # unconstrained like the log's (see Event)
        Run,
        on_delete=models.CASCADE,
        related_name="checkpoints",
        db_index=False,
        db_constraint=False,
    )
    kind = models.CharField(max_length=20, choices=Kind.choices)
    last_sequence = models.PositiveIntegerField()
    state = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "-id"], name="checkpoint_latest")]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.kind} @{self.last_sequence}"


class ToolInvocation(models.Model):
    """TOOL-3: written authorised before execution and completed after."""

    class Status(models.TextChoices):
        AUTHORISED = "authorised"
        AWAITING_APPROVAL = "awaiting_approval"
        EXECUTING = "executing"
        COMPLETED = "completed"
        FAILED = "failed"
        UNCERTAIN = "uncertain"
        DENIED = "denied"
        EXPIRED = "expired"
        NOT_PERMITTED = "not_permitted"
        INTERRUPTED = "interrupted"

    OPEN = (Status.AUTHORISED, Status.AWAITING_APPROVAL, Status.EXECUTING)

    run = models.ForeignKey(  # unconstrained like the log's (see Event)
        Run,
        on_delete=models.CASCADE,
        related_name="invocations",
        db_index=False,
        db_constraint=False,
    )
    # The model turn that proposed the call: its place in its run (LOOP-3).
    turn_index = models.PositiveIntegerField()
    call_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=100)
    tool_version = models.CharField(max_length=20)
    arguments = models.JSONField(default=dict)
    arguments_digest = models.CharField(max_length=64)
    idempotency_key = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=Status.choices)
    effect_sent_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    # What the uncertain writes' index is kept by, so that no index reads `status`: a
    # completion (status, result, completed_at) then changes no indexed value and is a HOT
    # update, written once into the heap page and never into the table's indexes (PERF-1:
    # a tenth of a step's time on the server).
    uncertain = models.GeneratedField(
        expression=models.ExpressionWrapper(
            models.Q(status="uncertain"), output_field=models.BooleanField()
        ),
        output_field=models.BooleanField(),
        db_persist=True,
    )

    class Meta:
        ordering = ["run", "id"]
        # A constraint, not `unique=True`: that would add a second, pattern-ops index on
        # PostgreSQL that no query uses and every tool call writes (PERF-1).
        constraints = [
            models.UniqueConstraint(fields=["idempotency_key"], name="invocation_key_once")
        ]
        indexes = [
            models.Index(fields=["run", "turn_index", "call_id"], name="invocation_call"),
            # PERF-8, TOOL-4: the inbox lists the uncertain writes, a handful among millions.
            models.Index(
                fields=["-effect_sent_at"],
                name="invocation_uncertain",
                condition=models.Q(uncertain=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.call_id} ({self.status})"


@dataclass(frozen=True)
class TicketIdentity:
    """HITL-2, HITL-3: the fields that name one wait of one run, shown with a ticket and
    copied verbatim into every answer (the API's body, a page's hidden inputs)."""

    correlation_id: str
    run: int
    snapshot_id: str
    catalog_fingerprint: str
    call_id: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_fields(cls, data: Any) -> TicketIdentity:
        """Read from posted or parsed fields, as given: the resume service judges them. A
        run id that is not a number names no run (`run_mismatch`)."""
        try:
            run = int(str(data.get("run")))
        except ValueError:
            run = -1
        text = {name: str(data.get(name, "")) for name in _TEXT_FIELDS}
        return cls(run=run, **text)


_TEXT_FIELDS = ("correlation_id", "snapshot_id", "catalog_fingerprint", "call_id")


class Ticket(models.Model):
    """HITL-2: what a parked run waits for. Never holds a credential."""

    class Kind(models.TextChoices):
        """The ticket's target (HITL-2)."""

        TOOL_PERMISSION = "tool_permission"
        REMOTE_INPUT = "remote_input"
        TIMER = "timer"  # SCHED-3: `agent.wait`; the sweeper answers it at `deadline`
        # DEL-1: the run waits for a child run; its end answers the ticket, never a person.
        DELEGATION = "delegation"

    class Answer(models.TextChoices):
        """The kind of answer a target takes (HITL-3): a decision or a typed value."""

        PERMISSION = "permission"
        INPUT = "input"
        TIMER = "timer"  # the clock's alone: every answer a host sends mismatches
        DELEGATION = "delegation"  # a child run's end alone (DEL-1), likewise

    class Status(models.TextChoices):
        ACTIVE = "active"
        ANSWERED = "answered"
        EXPIRED = "expired"
        VOID = "void"

    correlation_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tickets")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE)
    snapshot_id = models.CharField(max_length=64)
    catalog_fingerprint = models.CharField(max_length=64)
    deadline = models.DateTimeField(null=True, blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    call_id = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=100, blank=True)
    arguments = models.JSONField(null=True, blank=True)
    arguments_digest = models.CharField(max_length=64, blank=True)
    question = models.TextField(blank=True)
    schema = models.JSONField(null=True, blank=True)
    # DEL-1: the child run a delegation ticket waits for.
    child = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    resolution = models.JSONField(null=True, blank=True)
    # OPS-6: when the cluster mailed the people who can answer, and the reminder.
    notified_at = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)
    # HITL-12: arguments an approver changed (redacted, valid for `tool`), which the
    # allows are now counted for and which run if the quorum is reached; the model's
    # own stay in `arguments`.
    edited_arguments = models.JSONField(null=True, blank=True)
    # A database default: the step statement inserts a ticket naming only its columns.
    edited_digest = models.CharField(max_length=64, blank=True, default="", db_default="")
    edited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # HITL-15: when the sweeper escalated the ticket, and when the outbox mailed the
    # configuration's reminder and the escalation (each claimed once, like notified_at).
    escalated_at = models.DateTimeField(null=True, blank=True)
    reminder_mailed_at = models.DateTimeField(null=True, blank=True)
    escalation_mailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # HITL-1: a run waits for one person's answer at a time; DEL-1's concurrent
            # siblings are a delegation ticket each (one per call), all active at once.
            models.UniqueConstraint(
                fields=["run"],
                condition=models.Q(status="active") & ~models.Q(kind="delegation"),
                name="one_active_ticket_per_run",
            ),
            models.UniqueConstraint(
                fields=["run", "call_id"],
                condition=models.Q(status="active", kind="delegation"),
                name="one_active_delegation_per_call",
            ),
        ]
        indexes = [models.Index(fields=["status", "deadline"], name="ticket_status_deadline")]

    def __str__(self) -> str:
        return f"ticket {self.correlation_id} ({self.kind}, {self.status})"

    @property
    def answer(self) -> str:
        """The answer this ticket takes: input for a question, else a decision."""
        if self.kind == Ticket.Kind.REMOTE_INPUT:
            return Ticket.Answer.INPUT
        if self.kind == Ticket.Kind.TIMER:
            return Ticket.Answer.TIMER
        if self.kind == Ticket.Kind.DELEGATION:
            return Ticket.Answer.DELEGATION
        return Ticket.Answer.PERMISSION

    @property
    def identity(self) -> TicketIdentity:
        return TicketIdentity(
            correlation_id=str(self.correlation_id),
            run=self.run_id,
            snapshot_id=self.snapshot_id,
            catalog_fingerprint=self.catalog_fingerprint,
            call_id=self.call_id,
        )

    @property
    def pending_arguments(self) -> Any:
        """HITL-12, HITL-13: the arguments an allow now approves (an edit's, else the
        model's)."""
        return self.arguments if self.edited_arguments is None else self.edited_arguments

    @property
    def pending_digest(self) -> str:
        return self.edited_digest or self.arguments_digest


class TicketApproval(models.Model):
    """HITL-13: one person's allow of a ticket's call with exactly these arguments,
    recorded as it arrives; the ticket is answered once enough of them agree."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    arguments_digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["ticket", "user", "arguments_digest"], name="one_approval_per_person"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user_id} allowed {self.ticket_id} ({self.arguments_digest[:12]})"


class Note(models.Model):
    """Written by the `notes.write` tool in the transaction that records its result."""

    title = models.CharField(max_length=200, db_index=True)
    body = models.TextField()
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL)
    call_id = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = NoteQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.title
