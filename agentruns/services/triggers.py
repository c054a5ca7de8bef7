"""Firing a trigger (SCHED-4): another system's signed request starts a run for the
trigger's owner.

The request is authenticated by its signature alone: HMAC-SHA256 under the trigger's
secret of "<timestamp>.<raw body>", the timestamp within the window of the server's clock,
compared in constant time. The signature is recorded with the run; the same signature again
answers with that run and starts nothing (its unique row decides a race of two replays).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from agentruns.errors import BadSignature, InvalidRequest, NotFound, NotPermitted, PayloadTooLarge
from agentruns.models import Run, Trigger, TriggerFiring
from agentruns.policy import may_act_as
from agentruns.services.runs import Submission, run_start_on_behalf

MAX_BODY_BYTES = 64 * 1024
SIGNATURE_PREFIX = "sha256="


@dataclass(frozen=True)
class Fired:
    run: Run
    created: bool  # False: a replay of a signature already accepted


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The header value a sender computes (docs/api.md shows it with openssl)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return SIGNATURE_PREFIX + mac.hexdigest()


def trigger_fire(
    *,
    slug: str,
    timestamp: str,
    signature: str,
    body: bytes,
    throttle: Callable[[int], None] | None = None,
    now: float | None = None,
) -> Fired:
    """`throttle` counts a new run against the owner's submissions (raising `Throttled`);
    it is asked only for a signed, fresh, unreplayed request, so nobody without the secret
    can spend the owner's rate."""
    if len(body) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"The body is over {MAX_BODY_BYTES} bytes.", limit=MAX_BODY_BYTES)
    trigger = (
        Trigger.objects.select_related("configuration", "owner")
        .filter(slug=slug, active=True)
        .first()
    )
    if trigger is None:
        raise NotFound("No such trigger.")
    # One spelling of the signature for both the check and the replay record, so a replay
    # in capitals or with spaces around it is still the same signature.
    signature = signature.strip().lower()
    signed_at = _checked(trigger, timestamp, signature, body, time.time() if now is None else now)
    digest = signature.removeprefix(SIGNATURE_PREFIX)
    replayed = _replayed(trigger, digest)
    if replayed is not None:
        return replayed
    refusal = may_act_as(trigger.owner)
    if refusal:
        raise NotPermitted(f"The trigger cannot start runs: {refusal}.")
    if throttle is not None:
        throttle(trigger.owner_id)
    submission = Submission(configuration=trigger.configuration.slug, input=_input(body))
    try:
        with transaction.atomic():
            run = run_start_on_behalf(
                owner=trigger.owner,
                submission=submission,
                trigger={"kind": "trigger", "slug": trigger.slug},
            )
            TriggerFiring.objects.create(
                trigger=trigger, signature=digest, signed_at=signed_at, run=run
            )
    except IntegrityError:
        replayed = _replayed(trigger, digest)  # a replay racing the first delivery lost
        if replayed is None:
            raise
        return replayed
    return Fired(run=run, created=True)


def _checked(trigger: Trigger, timestamp: str, signature: str, body: bytes, now: float) -> datetime:
    """The signature's time if it is fresh and right; else BadSignature, saying which."""
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise BadSignature("X-Agentruns-Timestamp must be Unix seconds.")
    window = settings.AGENTRUNS_TRIGGER_WINDOW_SECONDS
    if abs(now - int(timestamp)) > window:
        raise BadSignature(f"The timestamp is more than {window} s from the server's clock.")
    expected = sign(trigger.secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise BadSignature("The signature does not match the body and timestamp.")
    return datetime.fromtimestamp(int(timestamp), tz=UTC)


def _replayed(trigger: Trigger, digest: str) -> Fired | None:
    earlier = (
        TriggerFiring.objects.filter(trigger=trigger, signature=digest)
        .select_related("run")
        .first()
    )
    if earlier is None or earlier.run is None:
        return None
    return Fired(run=earlier.run, created=False)


def _input(body: bytes) -> str:
    """The JSON body, as the run's input text (redacted when the run is created, CG-11)."""
    try:
        value: Any = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest("The body must be JSON.") from exc
    return json.dumps(value, ensure_ascii=False, indent=2)
