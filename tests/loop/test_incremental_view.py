"""FS-3, LOOP-7, PERF-1: the loop keeps what its log says the next send carries (the view
and its provider messages) up step by step instead of reading the whole log again before
every turn. Extending must give exactly what the one recipe (`log_view`, `project`) gives
for the whole log, whatever the log holds: results out of model order, reused call ids,
orphans, withheld results, deferred tools found, mode switches and compactions."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from agentruns import events as ev
from agentruns.classes import Zone
from agentruns.events import LogEntry
from agentruns.runtime.compose import extend_view, log_view
from agentruns.runtime.context import extend_projection, project, projection
from agentruns.tools.policy import Mode

# Unregistered tools keep the class their result recorded (MCP-4): one over the ceiling of
# the zone below, so its results are withheld.
TOOLS = ("clock.now", "notes.read", "ext.secret_lookup", "ext.public_lookup")
CLASSES = {"ext.secret_lookup": "restricted", "ext.public_lookup": "public"}


@dataclass
class Config:
    """What `log_view` reads of a configuration: its zone and its modes."""

    zone: Zone = Zone.EXTERNAL_GLOBAL

    def mode(self, name: str | None) -> Mode:
        if name == "narrow":
            return Mode("narrow", ("clock.now",), ())
        return Mode("default", ("clock.now", "notes.read"), ("ext.public_lookup",))


call_ids = st.sampled_from(["a", "b", "c", "d", "e", "f"])


@st.composite
def logs(draw: st.DrawFn) -> list[LogEntry]:
    """A log of a thread: mostly well-formed turns, with the irregular in between."""
    entries: list[tuple[str, dict]] = [(ev.USER, {"text": "go"})]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(
            st.sampled_from(["turn", "turn", "turn", "result", "user", "mode", "compact", "other"])
        )
        if kind == "turn":
            ids = draw(st.lists(call_ids, max_size=3))
            calls = [{"id": i, "name": draw(st.sampled_from(TOOLS)), "arguments": {}} for i in ids]
            entries.append((ev.ASSISTANT, {"text": "t", "tool_calls": calls, "step": 0}))
            order = draw(st.permutations(range(len(calls))))
            for index in order[: draw(st.integers(0, len(calls)))]:
                entries.append(_result(calls[index], draw(st.sampled_from([ev.OK, ev.REFUSED]))))
        elif kind == "result":  # an orphan, or a second result for an earlier call
            entries.append(_result({"id": draw(call_ids), "name": "clock.now"}, ev.OK))
        elif kind == "user":
            entries.append((ev.USER, {"text": "more"}))
        elif kind == "mode":
            entries.append((ev.MODE_SWITCHED, {"mode": draw(st.sampled_from(["narrow", "x"]))}))
        elif kind == "compact":
            entries.append((ev.COMPACTION, {"summary": "s", "kept_from": len(entries)}))
        else:
            entries.append((ev.SECRET_REDACTED, {"where": "model_reply", "kinds": {"k": 1}}))
    return [LogEntry(n + 1, kind, payload, 1) for n, (kind, payload) in enumerate(entries)]


def _result(call: dict, status: str) -> tuple[str, dict]:
    payload = {"call_id": call["id"], "tool": call["name"], "status": status, "content": "r"}
    if call["name"] in CLASSES:
        payload["class"] = CLASSES[call["name"]]
    return ev.TOOL_RESULT, payload


@settings(max_examples=300, deadline=None)
@given(log=logs(), data=st.data(), enforce=st.booleans())
def test_fs3_a_view_extended_by_the_newest_events_is_the_view_of_the_whole_log(log, data, enforce):
    config = Config()
    split = data.draw(st.integers(0, len(log)))
    whole = log_view(log, config, enforce=enforce)
    earlier = log_view(log[:split], config, enforce=enforce)
    extended = extend_view(earlier, log[split:], config, enforce=enforce)
    reaches_back = any(e.type in (ev.COMPACTION, ev.MODE_SWITCHED) for e in log[split:])
    assert (extended is None) == reaches_back
    if extended is not None:
        assert extended == whole


@settings(max_examples=300, deadline=None)
@given(log=logs(), data=st.data())
def test_loop7_messages_extended_by_the_newest_events_are_the_projection_of_the_whole_log(
    log, data
):
    effective = log_view(log, Config()).effective
    split = data.draw(st.integers(0, len(effective)))
    assert projection(effective).messages == tuple(project(effective))
    extended = extend_projection(projection(effective[:split]), effective[split:])
    if extended is not None:
        assert extended.messages == tuple(project(effective))


def test_loop7_a_log_that_reads_in_order_is_always_extended():
    """The loop's own logs (results in model order) never fall back to the whole log."""
    turn = {"text": "", "tool_calls": [{"id": "a", "name": "clock.now", "arguments": {}}]}
    log = [
        LogEntry(1, ev.USER, {"text": "go"}),
        LogEntry(2, ev.ASSISTANT, turn),
        LogEntry(3, ev.TOOL_RESULT, {"call_id": "a", "tool": "clock.now", "status": ev.OK}),
        LogEntry(4, ev.ASSISTANT, {"text": "done"}),
    ]
    for split in range(len(log) + 1):
        extended = extend_projection(projection(log[:split]), log[split:])
        assert extended is not None and extended.messages == tuple(project(log))
