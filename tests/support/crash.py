"""Helpers for the loop's recovery tests: worker child processes that die by SIGKILL at a
fault point, the in-process equivalent, the two-tool run through the fake OpenAI server,
and comparing event histories.

A child (`python -m tests.support.child <run_id>`) connects to the *current test
database*, so tests that use one need `@pytest.mark.django_db(transaction=True)`: the rows
they create must be committed for the child to see them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

from django.conf import settings
from django.utils import timezone

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.models import Configuration, Event, Note, Run, ToolInvocation
from agentruns.runtime import faults
from agentruns.runtime.context import pairing_problems, project
from agentruns.runtime.loop import execute_run
from agentruns.store.connection import database_url
from tests.support.catalog import make_openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 60.0


# ---------------------------------------------------------------- child processes


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def signal(self) -> int | None:
        """The signal that ended the child, if one did."""
        return -self.returncode if self.returncode < 0 else None

    @property
    def killed(self) -> bool:
        return self.signal == signal.SIGKILL

    def __str__(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def child_env(
    *,
    faults: str = "",
    trace: Path | None = None,
    effect_file: Path | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AGENTRUNS_")}
    env.update(
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="config.settings",
        AGENTRUNS_EXTRA_TOOL_MODULES="tests.support.tools",
        AGENTRUNS_FAULTS=faults,
        AGENTRUNS_LOG_LEVEL="ERROR",
        AGENTRUNS_PROVIDER_KEY_VARS=",".join(settings.AGENTRUNS_PROVIDER_KEY_VARS),
        PYTHONUNBUFFERED="1",
    )
    if trace is not None:
        env["AGENTRUNS_FAULT_TRACE"] = str(trace)
    if effect_file is not None:
        env["AGENTRUNS_TEST_EFFECT_FILE"] = str(effect_file)
    env.update(extra or {})
    return env


def run_child(
    run_id: int,
    *,
    faults: str = "",
    trace: Path | None = None,
    effect_file: Path | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = CHILD_TIMEOUT,
) -> ChildResult:
    """Drive the run in a fresh worker process and wait for it to exit (or be killed)."""
    completed = subprocess.run(
        [sys.executable, "-m", "tests.support.child", str(run_id)],
        cwd=PROJECT_ROOT,
        env=child_env(faults=faults, trace=trace, effect_file=effect_file, extra=extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return ChildResult(completed.returncode, completed.stdout, completed.stderr)


def expire_lease(run_id: int) -> None:
    """What time does to a dead worker's lease: the run stays `running`, but claimable."""
    updated = Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).update(
        lease_expires_at=timezone.now() - timedelta(minutes=5)
    )
    assert updated == 1, "only a running run has a lease to expire"


def read_trace(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def occurrences(trace: list[str]) -> list[str]:
    """["commit", "provider", "commit"] -> ["commit:1", "provider:1", "commit:2"]."""
    seen: Counter[str] = Counter()
    points = []
    for name in trace:
        seen[name] += 1
        points.append(f"{name}:{seen[name]}")
    return points


# ---------------------------------------------------------------- in-process crashes


class SimulatedCrash(BaseException):
    """SIGKILL at a fault point, in-process: everything committed before the point stays,
    nothing after it runs, and the executor's memory is thrown away. Every fault point
    sits outside any transaction, so the database is left exactly as a kill leaves it."""


@contextmanager
def fault_hook(hook: Callable[[str, int], None]) -> Iterator[list[str]]:
    """Call `hook(name, occurrence)` at every fault point the executor reaches; yields the
    occurrences reached, in order ("commit:1", "provider:1", ...)."""
    hits: Counter[str] = Counter()
    reached: list[str] = []

    def fault_point(name: str) -> None:
        hits[name] += 1
        reached.append(f"{name}:{hits[name]}")
        hook(name, hits[name])

    with mock.patch.object(faults, "fault_point", fault_point):
        yield reached


def parse_point(point: str) -> tuple[str, int]:
    name, nth = point.split(":")
    return name, int(nth)


def crash_in_process(run_id: int, point: str) -> None:
    """Drive the run until `point` (e.g. "commit:3") and 'kill' it there."""
    name, nth = parse_point(point)

    def hook(reached: str, count: int) -> None:
        if reached == name and count == nth:
            raise SimulatedCrash(point)

    try:
        with fault_hook(hook):
            outcome = execute_run(run_id)
    except SimulatedCrash:
        return
    raise AssertionError(f"the run ended ({outcome}) without reaching {point}")


def crash_when(run_id: int, predicate: Callable[[], bool], name: str = faults.COMMIT) -> str:
    """Drive the run until `predicate()` holds at a `name` fault point and 'kill' it there;
    returns the occurrence ("commit:3"), which a child can be told to die at."""
    reached: list[str] = []

    def hook(point: str, count: int) -> None:
        if point == name and predicate():
            reached.append(f"{point}:{count}")
            raise SimulatedCrash(reached[0])

    try:
        with fault_hook(hook):
            outcome = execute_run(run_id)
    except SimulatedCrash:
        return reached[0]
    raise AssertionError(f"the run ended ({outcome}) before the condition held")


def note_written(run_id: int) -> Callable[[], bool]:
    return lambda: Note.objects.filter(run_id=run_id).exists()


def turns_committed(run_id: int, turns: int = 1) -> Callable[[], bool]:
    return lambda: Event.objects.filter(run_id=run_id, type=ev.ASSISTANT).count() >= turns


def point_where(
    user: Any, configuration: str, condition: Callable[[int], Callable[[], bool]]
) -> str:
    """Probe a fresh run in-process for the first commit at which `condition(run_id)`
    holds, so a child can be killed exactly there however the runtime numbers its
    commits."""
    probe = submit(user, configuration)
    return crash_when(probe.pk, condition(probe.pk))


# ---------------------------------------------------------------- runs and histories


def run_events(run_id: int) -> list[LogEntry]:
    rows = Event.objects.filter(run_id=run_id).order_by("sequence")
    return [LogEntry(e.sequence, e.type, e.payload, e.run_id) for e in rows]


NOTE_ID = re.compile(r"Saved note \d+")


def history(run_id: int) -> list[tuple[str, dict[str, Any]]]:
    """Types and payloads in order; ids, times, row numbers and token counts do not take
    part."""
    return [(event.type, normalise(event.payload)) for event in run_events(run_id)]


def normalise(payload: dict[str, Any]) -> dict[str, Any]:
    # A provider's token counts (OPS-1) measure the request, which holds row numbers.
    payload = {key: value for key, value in payload.items() if key != "usage"}
    content = payload.get("content")
    if isinstance(content, str):
        return {**payload, "content": NOTE_ID.sub("Saved note #", content)}
    return payload


def provider_pairing_problems(run_id: int) -> list[str]:
    """LOOP-7 over the run's whole stored history, as the next send would project it."""
    return pairing_problems(project(run_events(run_id)))


def effect_lines(path: Path, run_id: int) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.startswith(f"{run_id}:")]


# ---------------------------------------------------------------- recovery expectations


@dataclass(frozen=True)
class Baseline:
    """An uninterrupted run: its history, its model requests and the fault points it
    passed, in order."""

    history: list[tuple[str, dict[str, Any]]]
    model_requests: int
    points: list[str]


def record_baseline(user: Any, fake: FakeProvider, configuration: str) -> Baseline:
    """Drive a fresh run in-process, uninterrupted, recording its fault points."""
    before = len(fake.requests)
    run = submit(user, configuration)
    with fault_hook(lambda name, count: None) as points:
        assert execute_run(run.pk) == Run.Status.COMPLETED
    return Baseline(history(run.pk), len(fake.requests) - before, list(points))


def uncertain_write(run_id: int, call_id: str) -> bool:
    """TOOL-4's `uncertain` condition, read from what a stopped worker left: the write's
    watermark is set and its result is not recorded."""
    sent = ToolInvocation.objects.filter(
        run_id=run_id, call_id=call_id, effect_sent_at__isnull=False
    ).exists()
    answered = any(
        kind == ev.TOOL_RESULT and p["call_id"] == call_id for kind, p in history(run_id)
    )
    return sent and not answered


UNKNOWN = "<outcome unknown>"


def expected_history(
    baseline: Baseline, uncertain_call: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The uninterrupted history, except TOOL-4's documented case: a write whose watermark
    was set when its worker died becomes `uncertain`, with a model-visible 'outcome
    unknown' instead of its output."""
    expected = []
    for kind, payload in baseline.history:
        if kind == ev.TOOL_RESULT and payload["call_id"] == uncertain_call:
            # No output was recorded, so neither is the class it would carry (MCP-4).
            kept = {key: value for key, value in payload.items() if key != "class"}
            payload = {**kept, "status": ev.UNCERTAIN, "content": UNKNOWN}
        expected.append((kind, payload))
    return expected


def comparable_history(run_id: int) -> list[tuple[str, dict[str, Any]]]:
    masked = []
    for kind, payload in history(run_id):
        if kind == ev.TOOL_RESULT and payload.get("status") == ev.UNCERTAIN:
            assert payload["content"].startswith("Outcome unknown"), payload
            payload = {**payload, "content": UNKNOWN}
        masked.append((kind, payload))
    return masked


# ---------------------------------------------------------------- the two-tool run

NOTE_CALL: dict[str, Any] = {
    "id": "call_note",
    "name": "notes_write",
    "arguments": {"title": "two-tool", "body": "written exactly once"},
}
EXTERNAL_CALL: dict[str, Any] = {
    "id": "call_ext",
    "name": "test_external_write",
    "arguments": {"value": "v1"},
}
TWO_TOOLS = ["notes.write", "test.external_write"]
FINAL_TEXT = "Both are recorded."


def two_tool_reply(body: dict[str, Any], path: str) -> dict[str, Any]:
    """Decided by the request alone, so a request repeated after a crash gets the same
    reply: turn one proposes both calls, any request carrying results gets the answer."""
    if any(message.get("role") == "tool" for message in body.get("messages") or ()):
        return {"text": FINAL_TEXT}
    return {"text": "", "tool_calls": [NOTE_CALL, EXTERNAL_CALL]}


def two_tool_configuration(
    fake: FakeProvider, slug: str = "two-tool", *, max_tool_calls: int = 2
) -> Configuration:
    """Both tools granted and exempt from approval (approvals are not under test here)."""
    return make_openai_configuration(
        slug,
        fake,
        allowed_tools=TWO_TOOLS,
        approval_exempt_tools=TWO_TOOLS,
        max_tool_calls=max_tool_calls,
    )


# A worker child that claims a run and dies at once (SIGKILL) before it executes anything:
# the crash between an approval being committed and the approved tool starting. The fault
# points all sit after some step was written, so this is a child of its own.
CLAIM_AND_DIE = """
import os, signal, sys
import django
django.setup()
from agentruns.store.transitions import claim
claimed = claim(int(sys.argv[1]))
print("claimed" if claimed else "not claimable", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def claim_and_die(run_id: int) -> ChildResult:
    completed = subprocess.run(
        [sys.executable, "-c", CLAIM_AND_DIE, str(run_id)],
        cwd=PROJECT_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    return ChildResult(completed.returncode, completed.stdout, completed.stderr)
