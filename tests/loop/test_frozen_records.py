"""LOOP-3, PERF-1: the log's records and entries are immutable values. They are built
through `agentruns.frozen.quick` (born as a mutable twin, then frozen) because a frozen
dataclass's own `__init__` cost five times as many instructions; what is built must be
exactly what the dataclass would have built, and nothing may change it afterwards."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from agentruns import events as ev
from agentruns.events import LogEntry
from agentruns.frozen import quick
from tests.loop.test_event_records import STORED

VALUES = [
    ev.ProposedCall("c1", "notes.write", {"title": "t"}, raw_arguments="{}"),
    ev.ServedBy("default", "local", "m"),
    ev.SentRecord(1, 2, 3, "internal", "internal", {"snippet:a": 1}, (4,)),
    ev.CopiedFrom(7, 3),
    ev.EditRecord("a", "b", "ann"),
    ev.Recorded("notes.read", "d", ev.OK, "x"),
]


def records() -> list[object]:
    built = [ev.parse(kind, payload) for kind, payload in STORED]
    return [*built, *VALUES, LogEntry(1, *STORED[0], run_id=2)]


@pytest.mark.parametrize("record", records(), ids=lambda r: type(r).__name__)
def test_loop3_a_record_is_immutable_and_exactly_what_its_dataclass_declares(record):
    cls = type(record)
    field = dataclasses.fields(record)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, field, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(record, field)
    assert not hasattr(record, "__dict__")  # slotted: no attribute can be added either
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.init}
    assert cls(**values) == record and repr(cls(**values)) == repr(record)
    assert type(dataclasses.replace(record)) is cls and dataclasses.replace(record) == record
    assert copy.deepcopy(record) == record and pickle.loads(pickle.dumps(record)) == record


@pytest.mark.parametrize(("kind", "payload"), STORED, ids=[k for k, _ in STORED])
def test_loop3_every_record_round_trips_through_its_payload(kind, payload):
    record = ev.parse(kind, payload)
    assert type(record) is ev.RECORDS[kind]
    assert ev.RECORDS[kind].from_payload(record.to_payload()) == record
    assert record.to_payload() == payload


def test_perf1_a_quick_record_is_built_as_its_dataclass_would_build_it():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Plain:
        a: int
        b: tuple[int, ...] = ()
        c: list[int] = dataclasses.field(default_factory=list)

    @quick
    @dataclasses.dataclass(frozen=True, slots=True)
    class Quick:
        a: int
        b: tuple[int, ...] = ()
        c: list[int] = dataclasses.field(default_factory=list)

    for args, kwargs in [((1,), {}), ((1, (2,)), {}), ((), {"a": 1, "c": [3]})]:
        quick_one, plain_one = Quick(*args, **kwargs), Plain(*args, **kwargs)
        assert [getattr(quick_one, n) for n in "abc"] == [getattr(plain_one, n) for n in "abc"]
    assert Quick(1).c is not Quick(1).c  # a default factory is called once an instance
    # Its twin stores and deletes as object does: with either of the two frozen, each of
    # its stores would call into Python and cost what the frozen `__init__` did.
    twin = Quick.__new__.__globals__["_twin"]
    assert twin.__setattr__ is object.__setattr__ and twin.__delattr__ is object.__delattr__
    assert type(Quick(1)) is Quick
    with pytest.raises(TypeError):
        Quick()  # a required field is required


def test_perf1_a_log_entry_read_from_the_store_parses_its_payload_as_it_is_made():
    kind, payload = STORED[0]
    entry = LogEntry(5, kind, payload)
    assert entry.data == ev.parse(kind, payload)
    record = ev.parse(kind, payload)
    assert LogEntry.at(6, record.item()).data is record
