"""Submitting, dry-running and cancelling runs: the one path the API, admin and pages use."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from agentruns import events as ev
from agentruns.errors import (
    Conflict,
    DailyLimitReached,
    InvalidIdempotencyKey,
    InvalidRequest,
    NotFound,
    NotPermitted,
)
from agentruns.events import LogEntry
from agentruns.gate.audit import current_enforcement
from agentruns.gate.core import compose_sources
from agentruns.gate.lookups import carried_for_send, forced_for_composition
from agentruns.gate.readout import readout
from agentruns.models import (
    Configuration,
    DailyUsage,
    Event,
    Run,
    Skill,
    Snippet,
    Thread,
)
from agentruns.policy import may_cancel, may_see_run, may_steer, may_submit, visible_threads
from agentruns.providers.base import AssistantMessage, Message, ToolResultMessage, UserMessage
from agentruns.runtime.compose import log_view, next_request, thread_mode
from agentruns.runtime.config import build_runtime_config
from agentruns.runtime.effects import close_open_calls
from agentruns.runtime.fork import carried_of, delegated_floor
from agentruns.runtime.handback import Parent, child_class, child_result, hand_back, lock_parent
from agentruns.runtime.redaction import redact
from agentruns.runtime.state import restore
from agentruns.services.log import append_attributed, append_events
from agentruns.store import store
from agentruns.store.log import log_entries
from agentruns.store.tickets import invocation_close, tickets_void
from agentruns.store.transitions import run_cancel_parked
from agentruns.store.wakeups import enqueue_wake
from agentruns.tools.registry import canonical_json

MAX_INPUT_CHARS = 100_000
DIGEST_SALT = "agentruns.idempotency-key"

User = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class Submission:
    configuration: str
    input: str
    thread: int | None = None
    mode: str | None = None
    forced_snippets: Sequence[int] = field(default_factory=tuple)
    forced_skills: Sequence[int] = field(default_factory=tuple)

    def digest(self) -> str:
        """CLU-5, SEC-4: an HMAC of the raw request under a server secret, so two bodies that
        differ only in a (redacted) secret still conflict, while the stored digest cannot be
        brute-forced back into a weak secret without the key."""
        body = {
            "configuration": self.configuration,
            "input": self.input,
            "thread": self.thread,
            "mode": self.mode,
            "forced_snippets": list(self.forced_snippets),
            "forced_skills": list(self.forced_skills),
        }
        return salted_hmac(DIGEST_SALT, canonical_json(body), algorithm="sha256").hexdigest()


def startable_configuration(slug: str) -> Configuration:
    configuration = Configuration.objects.select_related("provider").filter(slug=slug).first()
    if configuration is None:
        raise InvalidRequest(
            "Unknown configuration.", fields={"configuration": [f"Unknown configuration {slug!r}."]}
        )
    if not configuration.active:
        raise InvalidRequest(
            "The configuration is inactive.",
            fields={"configuration": [f"Configuration {slug!r} is inactive."]},
        )
    return configuration


def _check_ids(model: type[Snippet] | type[Skill], ids: Sequence[int], name: str) -> None:
    known = set(model.objects.filter(pk__in=ids).values_list("pk", flat=True))
    unknown = [pk for pk in ids if pk not in known]
    if unknown:
        listed = ", ".join(str(pk) for pk in unknown)
        raise InvalidRequest(
            f"Unknown {name}.", fields={name: [f"Unknown {model.__name__.lower()} ids: {listed}."]}
        )


def _thread(user: User, thread_id: int, configuration: Configuration) -> Thread:
    thread = visible_threads(user).filter(pk=thread_id).first()
    if thread is None:
        raise InvalidRequest("Unknown thread.", fields={"thread": [f"Unknown thread {thread_id}."]})
    if not may_steer(user, thread):
        raise NotPermitted("Only the thread's initiator may add a prompt to it.")
    if thread.configuration_id != configuration.pk:
        raise InvalidRequest(
            "The thread belongs to another configuration.",
            fields={"thread": ["A thread keeps the configuration it started with."]},
        )
    return thread


def check_playground(user: User, submission: Submission, *, dry_run: bool = False) -> None:
    """FS-5: forcing sources or dry-running (which reveals every source's text) is the
    playground's, over any door: pages, admin and API alike."""
    forcing = bool(submission.forced_snippets or submission.forced_skills)
    if not may_submit(user, forcing=forcing, dry_run=dry_run):
        raise NotPermitted(
            "Forcing sources and dry runs need staff with the playground permission "
            "(agentruns.use_playground)."
        )


def check_input(text: str, *, required: bool = True) -> None:
    """A task's text: given (unless `required` is off: a fork may go on without one) and
    within MAX_INPUT_CHARS."""
    if required and not text.strip():
        raise InvalidRequest("Empty input.", fields={"input": ["Give the task to run."]})
    if len(text) > MAX_INPUT_CHARS:
        raise InvalidRequest(
            "Input too long.", fields={"input": [f"At most {MAX_INPUT_CHARS} characters."]}
        )


def check_mode(configuration: Configuration, mode: str) -> None:
    """DEF-1: a mode the configuration has."""
    config = build_runtime_config(configuration)
    if not config.has_mode(mode):
        known = ", ".join(m.name for m in config.modes)
        raise InvalidRequest(
            "Unknown mode.", fields={"mode": [f"Unknown mode {mode!r}; use {known}."]}
        )


def _validate(user: User, submission: Submission) -> tuple[Configuration, Thread | None]:
    check_input(submission.input)
    configuration = startable_configuration(submission.configuration)
    _check_ids(Snippet, submission.forced_snippets, "forced_snippets")
    _check_ids(Skill, submission.forced_skills, "forced_skills")
    thread = _thread(user, submission.thread, configuration) if submission.thread else None
    if submission.mode is not None:
        check_mode(configuration, submission.mode)
    return configuration, thread


def run_submit(
    *, user: User, submission: Submission, idempotency_key: str | None = None
) -> tuple[Run, bool]:
    """Create the run, its first events and its wake-up in one transaction (CLU-4).
    Returns (run, created); the same Idempotency-Key and body return the original (CLU-5)."""
    check_playground(user, submission)
    owner = user if user.is_authenticated else None
    check_idempotency_key(idempotency_key)
    if idempotency_key:
        existing = _idempotent_match(owner, idempotency_key, submission)
        if existing:
            return existing, False
    configuration, thread = _validate(user, submission)
    check_daily_limit(configuration)
    try:
        with transaction.atomic():
            run = _create(owner, configuration, thread, submission, idempotency_key)
    except IntegrityError as exc:
        if idempotency_key:
            existing = _idempotent_match(owner, idempotency_key, submission)
            if existing:
                return existing, False
        raise Conflict(
            "The thread already has a run in progress; wait for it or cancel it."
        ) from exc
    return run, True


def run_start_on_behalf(*, owner: Any, submission: Submission, trigger: dict[str, Any]) -> Run:
    """SCHED-2, SCHED-4: a run the system starts for `owner`, its initiator, recording what
    started it; gated and parked like any other (nothing is approved on its behalf). Runs
    in the caller's transaction; raises what a person's submission would (an inactive
    configuration, the daily limit) so the caller records why nothing started."""
    configuration, _thread = _validate(owner, submission)
    check_daily_limit(configuration)
    return _create(owner, configuration, None, submission, None, trigger)


MAX_IDEMPOTENCY_KEY = Run._meta.get_field("idempotency_key").max_length or 200
_KEY_CHARACTERS = re.compile(r"[\x20-\x7e]+")


def check_idempotency_key(key: str | None) -> None:
    """SEC-14: a key is 1 to MAX_IDEMPOTENCY_KEY printable ASCII characters (a UUID, a
    token); longer, or holding NUL or another control character, it names nothing."""
    if key is None:
        return
    if len(key) > MAX_IDEMPOTENCY_KEY:
        raise InvalidIdempotencyKey(
            f"The Idempotency-Key is {len(key)} characters long; at most "
            f"{MAX_IDEMPOTENCY_KEY} are allowed."
        )
    if not _KEY_CHARACTERS.fullmatch(key):
        raise InvalidIdempotencyKey(
            "The Idempotency-Key may hold only printable ASCII characters (no NUL, no "
            "control characters)."
        )


def check_daily_limit(configuration: Configuration) -> None:
    """OPS-2: over the limit, a new run would only fail before its first turn."""
    limit = configuration.daily_token_limit
    if DailyUsage.at_limit(configuration.pk, limit):
        raise DailyLimitReached(
            f"Configuration {configuration.slug!r} used its {limit} tokens for today (UTC).",
            limit=limit,
        )


def _idempotent_match(owner: Any, key: str, submission: Submission) -> Run | None:
    run = Run.objects.filter(created_by=owner, idempotency_key=key).first()
    if run and run.request_digest != submission.digest():
        raise Conflict("This Idempotency-Key was used with a different request.")
    return run


def _create(
    owner: Any,
    configuration: Configuration,
    thread: Thread | None,
    submission: Submission,
    idempotency_key: str | None,
    trigger: dict[str, Any] | None = None,
) -> Run:
    # SEC-4: only the redacted text is ever written (an UPDATE would leave the raw input in
    # a dead row version and in the WAL).
    text, kinds = redact(submission.input)
    return run_open(
        owner=owner,
        configuration=configuration,
        thread=thread,
        text=text,
        forced=(submission.forced_snippets, submission.forced_skills),
        opening=lambda thread: [
            (True, *item) for item in _opening(submission, thread, text, kinds)
        ],
        idempotency_key=idempotency_key or None,
        request_digest=submission.digest(),
        trigger=trigger,
    )


# An opening event: whether it is the new run's own (else the thread's history, a copy:
# FORK-1, GOV-4), its type and payload.
Opening = tuple[bool, str, dict[str, Any]]


def run_open(
    *,
    owner: Any,
    configuration: Configuration,
    thread: Thread | None,
    text: str,
    forced: tuple[Sequence[int], Sequence[int]],
    opening: Callable[[Thread | None], Sequence[Opening]],
    **fields: Any,
) -> Run:
    """The one way a run starts, in the caller's transaction: on `thread` or a new thread
    of `configuration`, with its input `text` (redacted already: SEC-4) and forced sets,
    the events `opening` gives for the thread it continues (None: a new one), and its
    wake-up (CLU-4). A submission, a fork (FORK-1) and a replay (GOV-4) start here;
    `fields` say what else started it (an idempotency key, a trigger, the run copied)."""
    continued = thread
    if thread is None:
        thread = Thread.objects.create(configuration=configuration, created_by=owner)
    run = Run.objects.create(
        thread=thread,
        configuration=configuration,
        configuration_version=configuration.version,
        input=text,
        created_by=owner,
        forced_snippet_ids=list(dict.fromkeys(forced[0])),
        forced_skill_ids=list(dict.fromkeys(forced[1])),
        **fields,
    )
    items = [(run.pk if own else None, kind, payload) for own, kind, payload in opening(continued)]
    append_attributed(thread_id=thread.pk, items=items)
    enqueue_wake(run.pk)
    return run


def _opening(
    submission: Submission, thread: Thread | None, text: str, kinds: dict[str, int]
) -> list[tuple[str, dict[str, Any]]]:
    """The events a submission opens its run with (the input already redacted: SEC-4):
    a mode switch if it names another mode (DEF-1), what redaction found, the input."""
    items: list[ev.Item] = []
    if submission.mode and (thread is None or submission.mode != thread_mode_name(thread)):
        items.append(ev.ModeSwitched(submission.mode).item())
    items += ev.redacted("input", kinds)
    items.append(ev.UserMessage(text).item())
    return items


def thread_mode_name(thread: Thread) -> str:
    """The thread's mode by name (DEF-1): the one its log last switched to, else the
    configuration's default."""
    named = thread_mode(log_entries(Event.objects.filter(thread=thread, type=ev.MODE_SWITCHED)))
    return build_runtime_config(thread.configuration).mode(named).name


# FS-3: what a dry run's answer says about the text it shows (page and API alike).
DRY_SHOWN = "Shown to you, not sent: no provider was called and nothing was stored."
DRY_REFUSED = (
    "This send would be refused by the context gate (the run would end failed with "
    "context_refused and nothing would reach the provider). The text below is shown to you, "
    "not sent: no provider was called and nothing was stored."
)


def run_dry(*, user: User, submission: Submission) -> dict[str, Any]:
    """FS-3: the messages the first provider call would carry, with the readout; nothing
    is gated, sent or stored."""
    check_playground(user, submission, dry_run=True)
    configuration, thread = _validate(user, submission)
    config = build_runtime_config(configuration)
    snippets, skills, dropped = forced_for_composition(
        submission.forced_snippets, submission.forced_skills
    )
    logged = log_entries(Event.objects.filter(thread=thread)) if thread is not None else []
    text, kinds = redact(submission.input)
    # The run's first send: the thread's log with the events this submission would append.
    opening = _opening(submission, thread, text, kinds)
    after = logged[-1].sequence if logged else 0
    log = [*logged, *(LogEntry(after + i, kind, data) for i, (kind, data) in enumerate(opening, 1))]
    view = log_view(log, config)
    # FORK-1: a fork's thread carries its original's sources, and a thread the labelled
    # replies of its earlier runs (CG-12, CG-13); the readout folds them too.
    carried = carried_for_send(carried_of(logged))
    labelled = (*delegated_floor(logged), *view.replies)  # DEL-2: a child's thread
    sources = compose_sources(config.view, snippets, skills, carried, labelled)
    composed = next_request(view, sources=sources)
    shown = readout(config.view, sources, current_enforcement())
    refused = bool(shown["message"])
    return {
        "dry_run": True,
        "would_be_refused": refused,
        "notice": DRY_REFUSED if refused else DRY_SHOWN,
        "configuration": configuration.slug,
        "model": config.model,
        "messages": [{"role": "system", "content": t} for t in composed.system]
        + [message_dict(m) for m in composed.messages],
        "tools": [{"name": t.name, "wire_name": t.wire_name} for t in composed.tools],
        "redacted": kinds,
        "readout": {**shown, "dropped": [d.as_dict() for d in dropped]},
    }


def message_dict(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, AssistantMessage):
        return {
            "role": "assistant",
            "content": message.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
            ],
        }
    assert isinstance(message, ToolResultMessage)
    return {"role": "tool", "call_id": message.call_id, "content": message.content}


def run_cancel(*, user: User, run_id: int) -> Run:
    """HITL-11: a queued or awaiting run ends now and its ticket is void; a running one
    stops at its next step boundary."""
    run = Run.objects.filter(pk=run_id).first()
    if run is None or not may_see_run(user, run):
        raise NotFound("No such run.")
    if not may_cancel(user, run):
        raise NotPermitted("Only the run's initiator or an approver may cancel it.")
    with transaction.atomic():
        if run.parent_id:  # DEL-1: a parent's row before its child's, as the child's end
            lock_parent(Parent(run.parent_id, run.parent_call_id))
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.is_terminal:
            raise Conflict(f"The run already ended ({run.status}).", status=run.status)
        if run.status == Run.Status.RUNNING:
            _cancel_running(run, by=user.get_username())
        else:
            _cancel_parked(run, by=user.get_username())
    run.refresh_from_db()
    return run


def _cancel_running(run: Run, *, by: str) -> None:
    """The loop ends it at its next step boundary (and a child's end then goes back to
    its parent, DEL-4)."""
    if not run.cancel_requested:  # the first to ask is the one the audit names
        Run.objects.filter(pk=run.pk).update(cancel_requested=True, cancel_requested_by=by)


def _cancel_children(run: Run, *, by: str) -> None:
    """DEL-4: cancelling a parent cancels its live children (each of theirs in turn); the
    parent's ticket is void already, so their ends change nothing of it."""
    live = [Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING]
    for child in Run.objects.select_for_update().filter(parent=run, status__in=live):
        if child.status == Run.Status.RUNNING:
            _cancel_running(child, by=by)
        else:
            _cancel_parked(child, by=by)


def _hand_back_cancelled(run: Run, log: list[LogEntry]) -> None:
    """DEL-4: a parked child that is cancelled is an error result for its parent."""
    if not run.parent_id:
        return
    status, content = child_result(run.pk, Run.Status.CANCELLED, "", None)
    hand_back(
        child_id=run.pk,
        parent=Parent(run.parent_id, run.parent_call_id),
        status=status,
        content=content,
        data_class=child_class(run.pk, log),
        tool_calls=run.tool_calls_used,
    )


def _cancel_parked(run: Run, *, by: str) -> None:
    now = timezone.now()
    tickets_void(run.pk, now=now)
    log = log_entries(Event.objects.filter(run=run))
    state = restore(None, log)
    turn = state.turn
    open_calls = turn.open_calls() if turn else []
    rows = store().invocations(run.pk, turn.turn_index, [c.id for c in open_calls]) if turn else []
    sent = {call_id: (pk, sent_at is not None) for call_id, pk, _version, sent_at in rows}
    items, updates = close_open_calls(open_calls, sent, now)
    for change in updates:
        invocation_close(change)
    items.append(ev.RunCancelled(by).item())  # who, for the audit (OPS-5)
    append_events(thread_id=run.thread_id, run_id=run.pk, items=items)
    run_cancel_parked(run.pk)
    _cancel_children(run, by=by)
    _hand_back_cancelled(run, log)


def thread_switch_mode(*, user: User, thread_id: int, mode: str) -> Thread:
    """DEF-1: a thread changes mode between runs; the switch is an event in its log."""
    thread = visible_threads(user).filter(pk=thread_id).first()
    if thread is None:
        raise NotFound("No such thread.")
    if not may_steer(user, thread):
        raise NotPermitted("Only the thread's initiator may switch its mode.")
    check_mode(thread.configuration, mode)
    with transaction.atomic():
        # The thread row lock orders this check against a concurrent submission's append.
        Thread.objects.select_for_update().filter(pk=thread.pk).values_list("pk").get()
        if Run.objects.filter(thread=thread).exclude(status__in=Run.TERMINAL).exists():
            raise Conflict("The thread has a run in progress; switch modes between runs.")
        if thread_mode_name(thread) != mode:
            append_events(thread_id=thread.pk, run_id=None, items=[ev.ModeSwitched(mode).item()])
    return thread
