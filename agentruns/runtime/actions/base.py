"""What every action of the loop is handed: a `RunContext` holding the claimed run's
lease, its log and folded state, the live configuration and mode (cached per catalog
generation), and the one way to write a durable step (`commit`). The actions are
functions over it (`model_turn(ctx, turn_index)`, `call_tools(ctx, turn, calls)`,
`compact_if_needed(ctx, ...)`, `finish(ctx, ...)`); none keeps state of its own."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Any, NamedTuple

from django.db import IntegrityError

from agentruns import events as ev
from agentruns.classes import Enforcement
from agentruns.errors import Fenced
from agentruns.events import LogEntry
from agentruns.gate.audit import AuditRow, current_enforcement
from agentruns.gate.core import Decision, Source
from agentruns.models import Run
from agentruns.providers.base import Message
from agentruns.runtime import faults, journal
from agentruns.runtime.compose import LogView, extend_view, log_view
from agentruns.runtime.config import RuntimeConfig, runtime_config
from agentruns.runtime.context import Projection, extend_projection, projection
from agentruns.runtime.fork import carried_of, delegated_floor
from agentruns.runtime.handback import Parent, delegated_by
from agentruns.runtime.state import (
    ProposedCall,
    RunState,
    Turn,
    restore,
)
from agentruns.store import store
from agentruns.store.records import NO_ROWS, Claim, Lease, Rows, Signals, Written
from agentruns.tools.mcp.pinned import sync_pinned
from agentruns.tools.policy import (
    Mode,
    offered_tools,
)
from agentruns.tools.registry import (
    Tool,
)

logger = logging.getLogger(__name__)

# What a message is measured in (tokens, or bytes as their upper bound).
Measure = Callable[[Message], int]

Items = list[ev.Item]


class Outcome(StrEnum):
    """Where a drive stopped: a status the run reached, or why this worker let go of it."""

    COMPLETED = Run.Status.COMPLETED.value
    FAILED = Run.Status.FAILED.value
    CANCELLED = Run.Status.CANCELLED.value
    AWAITING = Run.Status.AWAITING.value
    RELEASED = "released"  # handed back to the queue (a shutdown)
    FENCED = "fenced"  # another worker holds the run now


@dataclass
class Invocation:
    """What the executor needs of an invocation row between writes."""

    pk: int
    tool_version: str
    effect_sent_at: Any


@dataclass
class Viewed:
    """`RunContext.view()` as of the first `events` of the log, for the catalog generation
    and enforcement of `key`, and its projection once asked for: of the first `projected`
    entries of `view.effective`, brought up to date only when asked again (a step's
    results each extend the view; the messages are asked for once a turn)."""

    key: tuple[int, bool]
    events: int
    view: LogView
    projection: Projection | None = None
    projected: int = 0
    # `RunContext.view_total`'s sums by measure: (entries of `view.effective` counted, sum).
    totals: dict[Measure, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Memos:
    """What a drive computed from its log and the catalog and may reuse: never an
    authority, each recomputed from them when stale. The log only grows within a drive
    (`RunContext.committed`) and an event never changes once written, so:

    - `config`: (catalog generation, the live configuration); stale once the executor's
      generation moves on (`RunContext.config`).
    - `view`: the log's view and its projection (`Viewed`), keyed by (generation, gate
      enforcement) and of the log's first `view.events` events; stale when the key
      changed, extended when only the log grew (`RunContext._viewed`).
    - `tokens`: an event's tokens, keyed by (sequence, withheld, exact count or bytes):
      never stale (compact.py `_event_tokens`).
    - `call_ids`: (events read, the call ids their model turns proposed), LOOP-7's reuse
      check: never stale, the events after the first ones read are read next (model_turn.py
      `_earlier_call_ids`).
    - `opening`: what the thread's opening event says (`Opening`): never stale, the log's
      first event never changes, so it is read once a drive, not once a turn.

    They live here rather than in `RunContext`'s own attributes (no `cached_property`):
    a context whose instance dictionary appeared midway through a drive made the
    interpreter give up specialising every `ctx.<attribute>` read (PERF-1)."""

    config: tuple[int, RuntimeConfig] | None = None
    view: Viewed | None = None
    tokens: dict[tuple[int, bool, bool], int] = field(default_factory=dict)
    call_ids: tuple[int, set[str]] = field(default_factory=lambda: (0, set()))
    opening: Opening | None = None


class Opening(NamedTuple):
    """What a thread's opening event says: the run that delegated it (DEL-1), the sources
    it carries by identity from an original run (FORK-1, DEL-2, GOV-4), and the floor of
    what a delegating parent had read, as labelled sources (DEL-2)."""

    parent: Parent | None
    carried: tuple[dict[str, Any], ...]
    floor: tuple[Source, ...]


@dataclass
class RunContext:
    """One claimed run as the actions see it. Only `commit`/`write` change the log, the state
    and the invocations; `memos` holds what the actions computed of them and may reuse
    (`Memos`). The lease and the claim never change; what does (the catalog generation
    this executor knows, today's usage, the forced set once composed) lives here, on the
    executor's thread."""

    claim: Claim
    events: list[LogEntry] = field(default_factory=list)
    state: RunState = field(default_factory=RunState)
    next_sequence: int = 1
    invocations: dict[str, Invocation] = field(default_factory=dict)
    memos: Memos = field(default_factory=Memos)
    # The catalog generation this executor decided on last (CG-9, SEC-6).
    generation: int = 0
    # OPS-2: (UTC day, the configuration's tokens that day) as this run's last write that
    # used tokens returned them, so the next turn's limit check needs no read of its own.
    used_today: tuple[date, int] | None = None
    # FS-4: the forced set, narrowed to the active sources once at the run's start.
    forced_snippet_ids: tuple[int, ...] | None = None
    forced_skill_ids: tuple[int, ...] | None = None
    composed: bool = False
    # SEC-6: sends given up in a row because the catalog moved after their composition.
    recomposed: int = 0
    # CG-12: the gate's decision on the latest send, whose high-water mark labels its reply.
    decision: Decision | None = None
    # A step written later, with the next write (runtime/journal.py): never one that
    # creates rows a caller needs the ids of, or that an effect or a person waits on.
    held: journal.Step | None = None
    # OPS-7: this drive's spans (a `traces.RunTrace`, which needs this module); None while
    # tracing is off, and then nothing traces at all.
    trace: Any = None

    @classmethod
    def load(cls, claim: Claim) -> RunContext:
        """REC-1 (and PERF-4): the thread's log and the newest checkpoint, read once."""
        lease = claim.lease
        sync_pinned(claim.generation)  # MCP-2: the tools a recorded call may name
        events, checkpoint = journal.read(lease, claim.log)
        mine = [event for event in events if event.run_id == lease.run_id]
        return cls(
            claim=claim,
            events=events,
            state=restore(checkpoint, mine),
            next_sequence=(events[-1].sequence + 1) if events else 1,
            generation=claim.generation,
            forced_snippet_ids=claim.forced_snippet_ids,
            forced_skill_ids=claim.forced_skill_ids,
            composed=claim.composed,
        )

    @property
    def lease(self) -> Lease:
        return self.claim.lease

    @property
    def signals(self) -> Signals:
        return self.claim.signals

    @property
    def tool_call_limit(self) -> int:
        """LOOP-6, DEL-3: the configuration's `max_tool_calls`, and for a child no more
        than its tree had left when it was delegated."""
        limit = self.config.max_tool_calls
        parent = self.parent
        if parent is None or parent.tool_call_budget is None:
            return limit
        return min(limit, parent.tool_call_budget)

    @property
    def parent(self) -> Parent | None:
        """DEL-1: the run that delegated this one, if any."""
        return self._opening().parent

    @property
    def carried(self) -> tuple[dict[str, Any], ...]:
        """FORK-1, DEL-2, GOV-4: the sources carried by identity from an original run."""
        return self._opening().carried

    @property
    def floor(self) -> tuple[Source, ...]:
        """DEL-2: the floor of what a delegating parent had read, as a labelled source."""
        return self._opening().floor

    def _opening(self) -> Opening:
        opening = self.memos.opening
        if opening is None:
            events = self.events
            opening = Opening(delegated_by(events), carried_of(events), delegated_floor(events))
            self.memos.opening = opening
        return opening

    @property
    def config(self) -> RuntimeConfig:
        """The live configuration: reloaded whenever the catalog generation moved on."""
        memo = self.memos.config
        if memo is not None and memo[0] == self.generation:
            return memo[1]
        config = runtime_config(self.lease.configuration_id, self.generation)
        self.memos.config = (self.generation, config)
        return config

    def view(self) -> LogView:
        """What the log says the next send carries (`log_view`, the one recipe the dry run
        and the inspector follow too); viewed whole again only when the catalog or the
        enforcement changed (CG-6: an observing gate withholds nothing, MCP-4) or the
        log's newest events reach back (`extend_view`), else extended by them."""
        return self._viewed().view

    def messages(self) -> tuple[Message, ...]:
        """`project(self.view().effective)`, kept up the same way."""
        viewed = self._viewed()
        effective = viewed.view.effective
        if viewed.projection is not None and viewed.projected < len(effective):
            added = effective[viewed.projected :]
            viewed.projection = extend_projection(viewed.projection, added)
        if viewed.projection is None:
            viewed.projection = projection(effective)
        viewed.projected = len(effective)
        return viewed.projection.messages

    def view_total(self, measure: Measure, count: Callable[[LogEntry], int]) -> int:
        """The sum of `count` over `view().effective`, kept up the same way: each entry
        counted once per view and measure, not once per turn (a long run's turns would
        otherwise each count its whole history)."""
        viewed = self._viewed()
        effective = viewed.view.effective
        counted, total = viewed.totals.get(measure, (0, 0))
        if counted < len(effective):
            total += sum(count(event) for event in effective[counted:])
            viewed.totals[measure] = (len(effective), total)
        return total

    def _viewed(self) -> Viewed:
        enforce = current_enforcement() is Enforcement.ENFORCE
        key = (self.generation, enforce)
        memos = self.memos
        known = memos.view
        if known is not None and known.key == key and known.events == len(self.events):
            return known
        if known is not None and known.key == key and known.events < len(self.events):
            added = self.events[known.events :]
            view = extend_view(known.view, added, self.config, enforce=enforce)
            if view is not None:  # its effective entries extend the known ones
                memos.view = Viewed(
                    key, len(self.events), view, known.projection, known.projected, known.totals
                )
                return memos.view
        view = log_view(self.events, self.config, enforce=enforce)
        memos.view = Viewed(key, len(self.events), view)
        return memos.view

    @property
    def mode(self) -> Mode:
        return self.view().mode

    def active_deferred(self) -> frozenset[str]:
        """DEF-4: derived from the log."""
        return self.view().active

    def offered(self) -> list[Tool]:
        return offered_tools(self.mode, self.active_deferred())

    def load_invocations(self, turn: Turn, calls: Sequence[ProposedCall]) -> None:
        missing = [call.id for call in calls if call.id not in self.invocations]
        if missing:
            rows = store().invocations(self.lease.run_id, turn.turn_index, missing)
            for call_id, pk, version, sent in rows:
                self.invocations[call_id] = Invocation(pk, version, sent)

    def commit(self, items: Items, **writes: Any) -> list[LogEntry]:
        """Write one durable step and make it this executor's view of the log."""
        written = self.write(items, **writes)
        self.committed(written)
        return written

    def write(
        self,
        items: Items,
        *,
        checkpoints: Sequence[tuple[str, int | None]] = (),
        continuation: Any = None,
        rows: Rows | Callable[[], Rows] = NO_ROWS,
        durable: bool = True,
        hold: bool = False,
    ) -> list[LogEntry]:
        """Events fenced by the lease, folded into the state, with the checkpoints taken
        on the way (`continuation`: the provider's data of a model turn among them) and
        the step's `rows` — written as one unit (journal.write), with the step held before
        it if any; or, with `hold`, held itself. `rows` given as a function are taken of
        the state with `items` folded in (a run row's counters)."""
        written = [
            LogEntry.at(self.next_sequence + offset, item, self.lease.run_id)
            for offset, item in enumerate(items)
        ]
        snapshots = self._fold(written, checkpoints, continuation)
        changed = rows() if callable(rows) else rows
        after = self.next_sequence - 1
        step = journal.Step(events=written, checkpoints=snapshots, rows=changed, after=after)
        if hold:
            redoable = not (
                durable or changed.new_invocations or changed.new_tickets or changed.run_update
            )
            assert redoable, "only a re-doable step"
            self.held = step if self.held is None else self.held.then(step)
            return written
        result = self._write(step, durable)
        for row in changed.new_invocations:
            self.invocations[row.call_id] = Invocation(
                result.invocations[row.call_id], row.tool_version, None
            )
        return written

    def audit(self, rows: list[AuditRow]) -> int:
        """CG-4: the rows, durably and behind the fence, with the held step if any; the
        live catalog generation (the gate's `save`)."""
        return self._write(journal.Step(after=self.next_sequence - 1, audits=rows), True).generation

    def _write(self, step: journal.Step, durable: bool) -> Written:
        if self.held is not None:
            step, self.held = self.held.then(step), None
        limited = self.config.daily_token_limit is not None
        try:
            result = journal.write(self.lease, step, durable=durable, count_today=limited)
        except IntegrityError as exc:
            # Another writer appended to this thread: this worker's view is stale.
            raise Fenced(str(exc)) from exc
        if result.cancel_requested:
            self.signals.request_cancel()
        self.generation = result.generation
        if not limited:  # no limit now: a total from before one was lifted is stale
            self.used_today = None
        elif result.used_today is not None:
            self.used_today = result.used_today
        return result

    def committed(self, written: list[LogEntry]) -> None:
        self.events.extend(written)
        self.next_sequence += len(written)
        faults.fault_point(faults.COMMIT)

    def _fold(
        self,
        written: list[LogEntry],
        checkpoints: Sequence[tuple[str, int | None]],
        continuation: Any,
    ) -> list[tuple[str, int, dict[str, Any]]]:
        snapshots = []
        applied = 0
        for kind, upto in checkpoints:
            upto = len(written) if upto is None else upto
            for event in written[applied:upto]:
                self._apply(event, continuation)
            applied = max(applied, upto)
            snapshots.append((kind, self.state.last_sequence, self.state.as_dict()))
        for event in written[applied:]:
            self._apply(event, continuation)
        return snapshots

    def _apply(self, event: LogEntry, continuation: Any) -> None:
        self.state.apply(event)
        if event.type == ev.ASSISTANT:
            self.state.continuation = continuation
