"""Replay before promoting (GOV-4): the one path the API and the pages use.

`replay_start` re-runs the recorded task of each chosen run on a candidate configuration:
per original a new run on a new thread, planned as a fork from just before the
original's first model turn (`runtime/replay.py`), carrying the original's sources
(CG-13) and its recording. The loop drives these runs like any other, gated before each
send (a refused send fails the run `context_refused`: a refused verdict), with every
tool call answered from the recording (`runtime/actions/replayed.py`): no tool runs, no
ticket opens, no child run starts. A replay's runs are kept out of the run lists, and
their events go to no webhook; their tokens are spent on the candidate and counted
against its daily limit like any (OPS-1, OPS-2).

`replay_table` is what changed per original: final reply, tool calls by name, verdict,
tokens and cost, read from the runs (nothing is stored beside them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db import transaction

from agentruns import events as ev
from agentruns.errors import InvalidRequest, NotFound, NotPermitted
from agentruns.events import LogEntry
from agentruns.models import Event, Replay, Run
from agentruns.policy import may_use_playground, visible_replays, visible_runs
from agentruns.runtime.fork import BadForkPoint
from agentruns.runtime.replay import plan_replay
from agentruns.selectors import Carried, Prefix, prefixes_sources
from agentruns.services.runs import (
    User,
    check_daily_limit,
    run_open,
    startable_configuration,
)
from agentruns.services.usage import runs_usage
from agentruns.store.log import logs_by_thread

MAX_RUNS = 100

# The gate's verdict on a run's sends, as the table shows it.
SENT = "sent"
REFUSED = "refused"
OBSERVED = "refused (observed)"


def replay_start(*, user: User, runs: Sequence[int], configuration: str) -> Replay:
    if not may_use_playground(user):
        raise NotPermitted(
            "Replays need staff with the playground permission (agentruns.use_playground)."
        )
    ids = list(dict.fromkeys(runs))
    if not ids or len(ids) > MAX_RUNS:
        raise InvalidRequest(
            "Name between 1 and 100 runs.",
            fields={"runs": [f"Give 1 to {MAX_RUNS} run ids; {len(ids)} given."]},
        )
    originals = visible_runs(user).in_bulk(ids)
    unknown = [str(pk) for pk in ids if pk not in originals]
    if unknown:  # SEC-2: a run the caller may not see is as unknown as one that is not
        raise InvalidRequest(
            "Unknown runs.", fields={"runs": [f"Unknown run ids: {', '.join(unknown)}."]}
        )
    live = [str(pk) for pk in ids if not originals[pk].is_terminal]
    if live:
        raise InvalidRequest(
            "Runs still going.",
            fields={"runs": [f"Runs {', '.join(live)} have not ended: nothing is recorded yet."]},
        )
    candidate = startable_configuration(configuration)
    check_daily_limit(candidate)
    owner: Any = user
    # One read of every original's thread log, not one per original.
    logs = logs_by_thread(
        Event.objects.filter(thread__in={r.thread_id for r in originals.values()})
    )
    prefixes = [_prefix(originals[pk], logs.get(originals[pk].thread_id, [])) for pk in ids]
    # What every original carries, read for all of them at once.
    carried = prefixes_sources(prefixes)
    with transaction.atomic():
        replay = Replay.objects.create(configuration=candidate, created_by=owner)
        for prefix, sources in zip(prefixes, carried, strict=True):
            _start_one(replay, prefix, owner, sources)
    return replay


def _prefix(original: Run, log: list[LogEntry]) -> Prefix:
    """CG-13: the copy holds the thread's runs before the original, so it carries their
    sources."""
    first = next((e.sequence for e in log if e.run_id == original.pk), 0)
    return Prefix(log, original, first)


def _start_one(replay: Replay, prefix: Prefix, owner: Any, carried: Carried) -> Run:
    """The original's replay run, on a new thread whose log is planned from the
    original's thread log (`runtime/replay.py`), and its wake-up (CLU-4)."""
    candidate, original, log = replay.configuration, prefix.run, prefix.log
    try:
        plan = plan_replay(
            log,
            run_id=original.pk,
            replay=replay.pk,
            configuration=candidate.slug,
            carried=carried.sources,
            floor=carried.floor,  # DEL-2: a replay of a child is held to its floor
        )
    except BadForkPoint as bad:
        raise InvalidRequest(str(bad), fields={"runs": [f"Run {original.pk}: {bad}"]}) from bad
    return run_open(
        owner=owner,
        configuration=candidate,
        thread=None,
        text=original.input,
        forced=(original.forced_snippet_ids or (), original.forced_skill_ids or ()),
        opening=lambda _new: plan.items,
        replay=replay,
        replay_of=original,
    )


def replay_get(*, user: User, replay_id: int) -> Replay:
    replay = visible_replays(user).filter(pk=replay_id).first()
    if replay is None:
        raise NotFound("No such replay.")
    return replay


def replay_table(replay: Replay) -> dict[str, Any]:
    """{id, configuration, status (running | done), results: one row per original}."""
    runs = list(
        Run.objects.filter(replay=replay)
        .select_related("configuration", "replay_of__configuration")
        .order_by("pk")
    )
    originals = [run.replay_of for run in runs if run.replay_of is not None]
    everyone = [*runs, *originals]
    usage = runs_usage(everyone)
    calls = _tool_calls([run.pk for run in everyone])
    observed = set(
        Event.objects.filter(run__in=everyone, type=ev.CONTEXT_OBSERVED).values_list(
            "run_id", flat=True
        )
    )
    results = []
    for run in runs:
        original = run.replay_of
        made = calls.get(run.pk, Counter())
        before = calls.get(original.pk, Counter()) if original is not None else Counter()
        if not run.is_terminal:
            before = made  # what changed is known once it ended: a queued run removed nothing
        results.append(
            {
                "run": run.replay_of_id,
                "replay_run": run.pk,
                "status": run.status,
                "original_status": original.status if original else None,
                "final_reply": run.final_reply,
                "final_reply_changed": (
                    run.is_terminal
                    and (original is None or run.final_reply != original.final_reply)
                ),
                "tool_calls": {
                    "added": sorted((made - before).elements()),
                    "removed": sorted((before - made).elements()),
                },
                "verdict": _verdict(run, observed),
                "original_verdict": _verdict(original, observed) if original else None,
                "usage": usage[run.pk].as_dict(),
                "original_usage": usage[original.pk].as_dict() if original else None,
            }
        )
    done = all(run.is_terminal for run in runs)
    return {
        "id": replay.pk,
        "configuration": replay.configuration.slug,
        "created_by": replay.created_by.get_username() if replay.created_by else None,
        "created_at": replay.created_at,
        "status": "done" if done else "running",
        "results": results,
    }


def _verdict(run: Run, observed: set[int]) -> str | None:
    """The gate's verdict on the run's sends once it ended: a refusal ends it failed with
    `context_refused` (CG-7); an observing gate lets the send go and records it (CG-6)."""
    if not run.is_terminal:
        return None
    if run.failure and run.failure.get("code") == "context_refused":
        return REFUSED
    return OBSERVED if run.pk in observed else SENT


def _tool_calls(run_ids: list[int]) -> dict[int, Counter[str]]:
    """The tool names each run's own model turns called (a fork's copied turns are its
    original's, not its own)."""
    turns = Event.objects.filter(run__in=run_ids, type=ev.ASSISTANT)
    calls: dict[int, Counter[str]] = {}
    for run_id, payload in turns.values_list("run_id", "payload"):
        turn = ev.parse(ev.ASSISTANT, payload)
        if not isinstance(turn, ev.AssistantMessage) or turn.copied_from is not None:
            continue
        calls.setdefault(run_id, Counter()).update(call.name for call in turn.tool_calls)
    return calls


def replays_of(user: User) -> list[Replay]:
    """The caller's replays, newest first (the page's list)."""
    return list(visible_replays(user)[:50])
