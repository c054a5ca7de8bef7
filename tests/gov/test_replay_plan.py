"""GOV-4, pure: a replay's log is planned from its original's (FORK-1's copy, from just
before the original's first model turn), and its recording answers a call by tool name
and arguments, repeated calls in the original's order."""

from __future__ import annotations

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.runtime.fork import carried_of
from agentruns.runtime.replay import answer, plan_replay, recording_in
from tests.loop.test_fork import ORIGINAL, entry


def plan() -> list[tuple[bool, str, dict]]:
    carried = [{"kind": "snippet", "id": 3, "from": 6}]
    return plan_replay(
        ORIGINAL, run_id=7, replay=5, configuration="candidate", carried=carried
    ).items


def as_log(items: list[tuple[bool, str, dict]], run_id: int = 99) -> list[LogEntry]:
    return [
        LogEntry(i, kind, payload, run_id if own else None)
        for i, (own, kind, payload) in enumerate(items, 1)
    ]


def test_gov4_the_replay_starts_before_the_originals_first_turn_with_its_prompt_its_own():
    items = plan()
    assert [(own, kind) for own, kind, _ in items] == [
        (True, ev.RUN_REPLAYED),
        (False, ev.MODE_SWITCHED),  # the thread's mode (DEF-1)
        (False, ev.USER),  # the earlier run's turns are history
        (False, ev.ASSISTANT),
        (True, ev.USER),  # the task: the loop asks the candidate's model next
    ]
    opening = as_log(items)[0].data
    assert isinstance(opening, ev.RunReplayed)
    assert (opening.replay, opening.original, opening.replay_of["at"]) == (5, 7, 5)
    assert carried_of(as_log(items)) == ({"kind": "snippet", "id": 3, "from": 6},)


def test_gov4_the_recording_holds_every_result_of_the_original_by_tool_and_arguments():
    replayed = recording_in(as_log(plan()))
    assert replayed is not None
    assert [(r.tool, r.content) for r in replayed.recording] == [
        ("tool_search", "r-s1"),
        ("clock.now", "r-c2"),
        ("clock.now", "r-c3"),
    ]
    assert replayed.recording[0].added_tool_names == ("http.get",)  # DEF-4 goes with it


def test_gov4_a_call_is_answered_by_name_and_arguments_in_the_originals_order():
    replayed = recording_in(as_log(plan()))
    assert replayed is not None
    first, second, third = (ev.ProposedCall(f"r{n}", "clock.now", {}) for n in (1, 2, 3))
    other = ev.ProposedCall("r4", "clock.now", {"zone": "UTC"})
    log = [
        *as_log(plan()),
        entry(6, ev.ASSISTANT, run=99, step=0, tool_calls=[c.as_dict() for c in (first, other)]),
        entry(7, ev.ASSISTANT, run=99, step=1, tool_calls=[second.as_dict(), third.as_dict()]),
    ]
    answers = [answer(replayed, c, log, 99) for c in (first, second, third, other)]
    assert [a.content if a else None for a in answers] == ["r-c2", "r-c3", "r-c3", None]
    unknown = ev.ProposedCall("r5", "http.get", {})
    assert answer(replayed, unknown, log, 99) is None


def test_gov4_a_run_that_never_reached_a_model_turn_replays_its_prompt():
    log = [entry(1, ev.USER, text="only a prompt", run=3), entry(2, ev.RUN_FAILED, run=3)]
    items = plan_replay(log, run_id=3, replay=1, configuration="c", carried=()).items
    assert [(own, kind) for own, kind, _ in items] == [(True, ev.RUN_REPLAYED), (True, ev.USER)]
