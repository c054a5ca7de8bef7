"""The executor: one claimed run driven to its next resting point (LOOP-4).

Every model reply and tool result is committed, fenced by the lease, before the loop acts
on it; no transaction is open across a provider call or a tool (LOOP-5). What to do next
is always `next_action(fold(log))`, so a fresh run, a crash recovery and a resume after an
approval take the same path (REC-1..REC-4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentruns import events as ev
from agentruns.answers import schema_problems
from agentruns.errors import ContextRefused, Fenced
from agentruns.gate.audit import context_assert
from agentruns.gate.core import Source, compose_sources
from agentruns.gate.lookups import forced_for_composition
from agentruns.models import Checkpoint, Run, Ticket, ToolInvocation
from agentruns.providers.base import (
    MalformedReply,
    ProviderError,
    ProviderRequest,
    Reply,
    ToolSpec,
    UserMessage,
)
from agentruns.providers.dispatch import dispatch
from agentruns.runtime import compaction, faults, journal
from agentruns.runtime.budget import fit
from agentruns.runtime.closing import UNKNOWN, close_open_calls, closed_status
from agentruns.runtime.compose import Composed, compose_request, thread_mode
from agentruns.runtime.config import RuntimeConfig, forced_sources, runtime_config
from agentruns.runtime.context import effective_events, pairing_problems, project
from agentruns.runtime.deferred import active_deferred
from agentruns.runtime.lease import Lease, claim, renew_if_due
from agentruns.runtime.redaction import redact, redact_value
from agentruns.runtime.state import (
    AskModel,
    CallTools,
    Complete,
    Ev,
    Finished,
    ProposedCall,
    RunState,
    Turn,
    next_action,
    restore,
)
from agentruns.runtime.tokens import fixed_tokens, message_tokens, truncate_tokens
from agentruns.store.connection import release_connection
from agentruns.store.transitions import released
from agentruns.store.wakeups import enqueue_wake
from agentruns.tools.policy import (
    Mode,
    catalog_fingerprint,
    needs_human,
    offered_tools,
    tool_refusal,
)
from agentruns.tools.registry import (
    REGISTRY,
    Effect,
    Human,
    Tool,
    ToolContext,
    ToolOutput,
    digest,
)

logger = logging.getLogger(__name__)

AWAITING = "awaiting"
RELEASED = "released"
FENCED = "fenced"

Items = list[tuple[str, dict[str, Any]]]


SUMMARY_INSTRUCTION = (
    "Summarise the conversation below for your own later use: the user's goals, decisions, "
    "facts and tool results that still matter. Be concise; do not invent anything."
)


def idempotency_key(run_id: int, step: int, call: ProposedCall, tool: Tool | None) -> str:
    """TOOL-3: from what the call *is*, never from which attempt runs it."""
    version = tool.version if tool else ""
    return digest([run_id, step, call.id, call.name, version, digest(call.arguments)])


@dataclass
class Screened:
    """What the loop decided about one proposed call before dispatch."""

    call: ProposedCall
    status: str | None = None  # a result status when the call will not run
    content: str = ""


@dataclass
class Executor:
    lease: Lease
    events: list[Ev] = field(default_factory=list)
    state: RunState = field(default_factory=RunState)
    next_sequence: int = 1
    invocations: dict[str, Invocation] = field(default_factory=dict)
    token_memo: dict[int, int] = field(default_factory=dict)
    config_memo: tuple[int, RuntimeConfig] | None = None
    active_memo: tuple[tuple[int, int], set[str]] | None = None
    # DEF-1: a thread switches modes only between runs, so one read at load suffices.
    mode_name: str | None = None

    # ---- entry -------------------------------------------------------------------------

    def drive(self) -> str:
        """Run until the run parks, ends, is released or loses its lease."""
        try:
            self._load()
            return self._loop()
        except Fenced:
            logger.warning("run %s: lease lost, stopping without writing", self.lease.run_id)
            return FENCED
        finally:
            release_connection()

    def _load(self) -> None:
        """REC-1 (and PERF-4): the thread's log and the newest checkpoint, read once."""
        self.events, checkpoint = journal.read(self.lease)
        self.next_sequence = (self.events[-1].sequence + 1) if self.events else 1
        self.mode_name = thread_mode(self.events)
        mine = [event for event in self.events if event.run_id == self.lease.run_id]
        self.state = restore(checkpoint, mine)

    def _loop(self) -> str:
        if self.lease.attempts > settings.AGENTRUNS_MAX_ATTEMPTS and not self.state.terminal:
            return self._finish_failed(
                "attempts_exhausted",
                f"The run's workers stopped {self.lease.attempts} times; giving up.",
            )
        if not self.lease.composed:
            self._compose()
        while True:
            stopped = self._boundary()
            if stopped:
                return stopped
            action = next_action(self.state)
            if isinstance(action, Finished):
                return action.status
            if isinstance(action, Complete):
                return self._finish(Run.Status.COMPLETED, [], final_reply=action.text)
            if isinstance(action, AskModel):
                outcome = self._model_turn(action.step)
            else:
                assert isinstance(action, CallTools)
                outcome = self._call_tools(action.turn, action.calls)
            if outcome:
                return outcome

    def _boundary(self) -> str | None:
        """Between steps: honour a cancel (HITL-11) or a shutdown, and keep the lease."""
        if self.lease.lost:
            raise Fenced("the lease was taken by another worker")
        if self.lease.cancel_requested:
            return self._finish(Run.Status.CANCELLED, [(ev.RUN_CANCELLED, {})])
        if self.lease.stop_requested:
            return self._release()
        renew_if_due(self.lease)
        return None

    # ---- configuration and context -----------------------------------------------------

    @property
    def config(self) -> RuntimeConfig:
        """The live configuration: reloaded whenever the catalog generation moved on."""
        memo = self.config_memo
        if memo is None or memo[0] != self.lease.generation:
            config = runtime_config(self.lease.configuration_id, self.lease.generation)
            self.config_memo = memo = (self.lease.generation, config)
        return memo[1]

    @property
    def mode(self) -> Mode:
        return self.config.mode(self.mode_name)

    def _active_deferred(self) -> set[str]:
        """DEF-4: derived from the log; recomputed only when the log or catalog changed."""
        if not self.mode.deferred:
            return set()
        key = (len(self.events), self.lease.generation)
        if self.active_memo is None or self.active_memo[0] != key:
            active = active_deferred(effective_events(self.events), self.mode.deferred)
            self.active_memo = (key, active)
        return self.active_memo[1]

    def _offered(self) -> list[Tool]:
        return offered_tools(self.mode, self._active_deferred())

    # ---- compaction (DEF-6) ------------------------------------------------------------

    def _event_tokens(self, event: Ev) -> int:
        tokens = self.token_memo.get(event.sequence)
        if tokens is None:
            tokens = sum(message_tokens(message) for message in project([event]))
            self.token_memo[event.sequence] = tokens
        return tokens

    def _compact_if_needed(self, system: list[str], specs: tuple[ToolSpec, ...]) -> str | None:
        budget = self.config.context_budget_tokens
        fixed = fixed_tokens(system, specs)
        units = compaction.units_of(
            effective_events(self.events),
            lambda events: sum(self._event_tokens(event) for event in events),
        )
        plan = compaction.plan(units, fixed=fixed, budget=budget)
        if plan is None:
            return self._over_budget(fixed, budget)
        refused = self._assert_context()  # CG-9: the summary call is a send too
        if refused:
            return refused
        summarised = [event for unit in plan.summarised for event in unit.events]
        request = ProviderRequest(
            model=self.config.model,
            system=(SUMMARY_INSTRUCTION,),
            messages=(UserMessage(compaction.transcript(summarised)),),
            purpose="summary",
        )
        release_connection()
        try:
            reply, _link = dispatch(self.config.links, request)
        except ProviderError as exc:
            return self._finish_failed("provider_error", f"Compaction failed: {exc}")
        summary = truncate_tokens(redact(reply.text)[0], plan.summary_allowance)
        payload = {
            "summary": summary,
            "kept_from": plan.kept_from,
            "active_deferred": sorted(self._active_deferred()),
            "summarised_events": len(summarised),
        }
        self._commit([(ev.COMPACTION, payload)], durable=False)
        return self._over_budget(fixed, budget)

    def _over_budget(self, fixed: int, budget: int) -> str | None:
        """DEF-6: nothing over the budget is ever sent, compacted or not."""
        needed = fixed + sum(self._event_tokens(e) for e in effective_events(self.events))
        if needed <= budget:
            return None
        return self._finish_failed(
            "context_budget_exceeded",
            f"The context needs {needed} tokens even after compaction; the budget is {budget}.",
            fields={"needed": needed, "budget": budget},
        )

    def _compose(self) -> None:
        """FS-4: a starting run injects only active forced sources and says what it left.
        A run that forces nothing has nothing to compose, and nothing to record."""
        if not (self.lease.forced_snippet_ids or self.lease.forced_skill_ids):
            self.lease.composed = True
            return
        snippets, skills, dropped = forced_for_composition(
            self.lease.forced_snippet_ids, self.lease.forced_skill_ids
        )
        self.lease.forced_snippet_ids = [s.id for s in snippets]
        self.lease.forced_skill_ids = [s.id for s in skills]
        items: Items = []
        if dropped:
            items.append((ev.SOURCES_DROPPED, {"sources": [d.as_dict() for d in dropped]}))
        self._commit(
            items,
            run_update={
                "forced_snippet_ids": self.lease.forced_snippet_ids,
                "forced_skill_ids": self.lease.forced_skill_ids,
                "composed_at": timezone.now(),
            },
            durable=False,
        )
        self.lease.composed = True

    def _model_turn(self, step: int) -> str | None:
        if step >= settings.AGENTRUNS_MAX_TURNS:
            return self._finish_failed(
                "turn_limit", f"The model took {step} turns without a final reply."
            )
        refused = self._assert_context()
        if refused:
            return refused
        config = self.config
        composed = self._composed()
        if composed.system_redacted and not self.state.system_redacted:
            self._commit(
                [(ev.SECRET_REDACTED, {"where": "system", "kinds": composed.system_redacted})]
            )
        logged = len(self.events)
        stopped = self._compact_if_needed(list(composed.system), composed.specs)
        if stopped:
            return stopped
        if len(self.events) != logged:  # compacted: send the log as it is now
            composed = self._composed()
        problems = pairing_problems(composed.messages)
        if problems:
            return self._finish_failed("corrupt_history", "; ".join(problems))
        request = ProviderRequest(
            model=config.model,
            system=composed.system,
            messages=composed.messages,
            tools=composed.specs,
            continuation=self.state.continuation,
            run=self.lease.run_id,
            step=step,
        )
        release_connection()
        try:
            reply, link = dispatch(config.links, request)
        except MalformedReply as exc:
            return self._finish_failed("provider_malformed_reply", str(exc))
        except ProviderError as exc:
            return self._finish_failed(
                "provider_error",
                str(exc),
                fields={"status": exc.status, "retryable": exc.retryable},
            )
        faults.fault_point(faults.PROVIDER)
        continuation = (
            {"link": link.slug, "data": reply.continuation} if reply.continuation else None
        )
        return self._record_turn(step, reply, {t.name for t in composed.tools}, continuation)

    def _composed(self) -> Composed:
        return compose_request(
            sources=self._sources(),
            mode=self.mode,
            active=self._active_deferred(),
            events=effective_events(self.events),
        )

    def _sources(self) -> tuple[Source, ...]:
        """CG-1 against the live configuration; the forced set by identity (RG-1, RG-2)."""
        snippets, skills = forced_sources(
            self.lease.forced_snippet_ids, self.lease.forced_skill_ids, self.lease.generation
        )
        return compose_sources(self.config.view, snippets, skills)

    def _assert_context(self) -> str | None:
        """CG-4..CG-9: an audit row per assert, decided on the configuration as cached for
        the catalog generation this executor knows; the same statement reads the live
        generation, and a decision taken on a stale one is taken again. A refusal ends the
        run before anything is sent."""
        for _ in range(3):
            known = self.lease.generation
            try:
                asserted = context_assert(
                    config=self.config.view, sources=self._sources(), run_id=self.lease.run_id
                )
            except ContextRefused as refused:
                if refused.generation is not None and refused.generation != known:
                    self.lease.generation = refused.generation  # decided on a stale catalog
                    continue
                return self._finish_failed(
                    "context_refused",
                    refused.detail,
                    fields=refused.fields,
                    extra=[(ev.CONTEXT_REFUSED, {"detail": refused.detail, **refused.fields})],
                )
            self.lease.generation = asserted.generation
            if asserted.generation == known:
                break
        if asserted.observed_refusal and not self.state.observed:
            self._commit([(ev.CONTEXT_OBSERVED, {"verdict": "refused (observed)"})])
        return None

    def _record_turn(
        self, step: int, reply: Reply, offered: set[str], continuation: Any = None
    ) -> str | None:
        text, redacted = redact(reply.text)
        calls = [self._call_from(tool_call, redacted) for tool_call in reply.tool_calls]
        reused = self._reused_call_ids(calls)
        if reused:
            return self._finish_failed(
                "corrupt_history",
                f"The model reused call ids {', '.join(sorted(reused))}; a history pairing "
                "them cannot exist (LOOP-7), so nothing was run.",
            )
        payload: dict[str, Any] = {
            "text": text,
            "tool_calls": [call.as_dict() for call in calls],
            "step": step,
            "tool_calls_before": self.state.tool_calls_used,
        }
        redaction = self._redaction_items("model_reply", redacted)
        if not calls:
            payload["granted"] = []
            return self._finish(
                Run.Status.COMPLETED,
                [*redaction, (ev.ASSISTANT, payload)],
                final_reply=text,
            )
        verdicts = [self._judge(call, offered) for call in calls]
        candidates = [v.call.id for v in verdicts if v.status is None]
        granted, over = fit(
            candidates, used_before=self.state.tool_calls_used, limit=self.config.max_tool_calls
        )
        for verdict in verdicts:
            if verdict.call.id in over:
                verdict.status = ev.REFUSED
                verdict.content = (
                    f"Refused: the tool budget of {self.config.max_tool_calls} calls for this "
                    "run is used up. Answer with what you have."
                )
        payload["granted"] = granted
        refusals = [
            ev.result_item(v.call.id, v.call.name, v.status, v.content)
            for v in verdicts
            if v.status is not None
        ]
        self._commit(
            [*redaction, (ev.ASSISTANT, payload), *refusals],
            new_invocations=[self._new_invocation(step, c) for c in calls if c.id in granted],
            checkpoints=(
                (Checkpoint.Kind.MODEL_RESPONSE, len(redaction) + 1),
                (Checkpoint.Kind.TOOL_PENDING, None),
            ),
            continuation=continuation,
            durable=False,
        )
        return None

    def _call_from(self, tool_call: Any, found: dict[str, int]) -> ProposedCall:
        """The registry name, and arguments redacted like any text (CG-11)."""
        tool = REGISTRY.by_wire(tool_call.name)
        arguments, kinds = redact_value(tool_call.arguments)
        raw, raw_kinds = redact(tool_call.raw_arguments or "")
        for kind, count in (*kinds.items(), *raw_kinds.items()):
            found[kind] = found.get(kind, 0) + count
        return ProposedCall(
            id=tool_call.id,
            name=tool.name if tool else tool_call.name,
            arguments=arguments,
            raw_arguments=raw if tool_call.raw_arguments is not None else None,
        )

    def _reused_call_ids(self, calls: list[ProposedCall]) -> set[str]:
        """Call ids pair calls with results (LOOP-7): one reused inside a turn or from the
        thread's history would break the pairing, so such a turn is never acted on."""
        ids = [call.id for call in calls]
        reused = {call_id for call_id in ids if ids.count(call_id) > 1}
        earlier = {
            call["id"]
            for event in self.events
            if event.type == ev.ASSISTANT
            for call in event.payload.get("tool_calls", [])
        }
        return reused | (set(ids) & earlier)

    def _judge(self, call: ProposedCall, offered: set[str]) -> Screened:
        """TOOL-2 and argument validation; a bad proposal becomes a model-visible result."""
        if call.arguments is None:
            return Screened(call, ev.ERROR, "Error: the arguments are not a JSON object.")
        refusal = tool_refusal(call.name, granted=self.config.granted, ceiling=self.config.ceiling)
        if refusal:
            return Screened(call, ev.REFUSED, f"Refused: {refusal[1]}")
        if call.name not in offered:
            if call.name in self.mode.deferred:
                return Screened(
                    call,
                    ev.REFUSED,
                    f"Refused: {call.name!r} is not available yet; use tool_search to activate it.",
                )
            return Screened(
                call, ev.REFUSED, f"Refused: {call.name!r} is not offered in this mode."
            )
        tool = REGISTRY.get(call.name)
        assert tool is not None
        errors = tool.argument_errors(call.arguments)
        if not errors and tool.human is Human.INPUT:
            errors = schema_problems(call.arguments.get("schema"))
        if errors:
            return Screened(call, ev.ERROR, "Error: invalid arguments: " + "; ".join(errors))
        return Screened(call)

    def _new_invocation(self, step: int, call: ProposedCall) -> dict[str, Any]:
        tool = REGISTRY.get(call.name)
        assert tool is not None
        human = needs_human(tool, self.config.exempt)
        return {
            "run_id": self.lease.run_id,
            "step": step,
            "call_id": call.id,
            "tool": call.name,
            "tool_version": tool.version,
            "arguments": call.arguments,
            "arguments_digest": digest(call.arguments),
            "idempotency_key": idempotency_key(self.lease.run_id, step, call, tool),
            "status": (
                ToolInvocation.Status.AWAITING_APPROVAL
                if human
                else ToolInvocation.Status.AUTHORISED
            ),
        }

    # ---- dispatching a batch -----------------------------------------------------------

    def _call_tools(self, turn: Turn, calls: Sequence[ProposedCall]) -> str | None:
        """HITL-1: calls that need no person run now; then the first that needs one parks
        the run. Results reach the model only when the whole turn is answered."""
        self._load_invocations(turn, calls)
        if any(turn.decisions.get(call.id) == ev.ALLOW for call in calls):
            # RG-1..RG-4: a resumed run re-gates before the approved call runs; if its
            # context may no longer be sent there is no point in acting on it.
            refused = self._assert_context()
            if refused:
                return refused
        waiting: list[ProposedCall] = []
        for call in calls:
            stopped = self._boundary()
            if stopped:
                return stopped
            if call.id not in turn.granted:
                self._record_result(call, ev.REFUSED, "Refused: not granted for this turn.")
                continue
            tool = REGISTRY.get(call.name)
            human = needs_human(tool, self.config.exempt) if tool else None
            if human and turn.decisions.get(call.id) != ev.ALLOW:
                waiting.append(call)
                continue
            self._run_call(turn, call)
        if waiting:
            return self._park(waiting[0])
        return None

    def _load_invocations(self, turn: Turn, calls: Sequence[ProposedCall]) -> None:
        missing = [call.id for call in calls if call.id not in self.invocations]
        if missing:
            rows = ToolInvocation.objects.filter(
                run_id=self.lease.run_id, step=turn.step, call_id__in=missing
            ).values_list("call_id", "pk", "tool_version", "effect_sent_at")
            for call_id, pk, version, sent in rows:
                self.invocations[call_id] = Invocation(pk, version, sent)

    def _run_call(self, turn: Turn, call: ProposedCall) -> None:
        tool = REGISTRY.get(call.name)
        invocation = self.invocations.get(call.id)
        problem = self._live_gate(call, tool, invocation, turn.decisions.get(call.id) == ev.ALLOW)
        if problem or tool is None or invocation is None:
            self._record_result(
                call,
                ev.NOT_PERMITTED,
                f"Not permitted: {problem or 'this call is no longer permitted'}.",
                invocation_status=ToolInvocation.Status.NOT_PERMITTED,
            )
            return
        context = ToolContext(
            run_id=self.lease.run_id,
            thread_id=self.lease.thread_id,
            step=turn.step,
            call_id=call.id,
            configuration_id=self.lease.configuration_id,
            catalog=self.mode.deferred,
            active=tuple(sorted(self._active_deferred())),
        )
        if tool.transactional:
            self._run_transactional(call, tool, context, invocation)
            return
        if tool.effect is Effect.WRITE:
            if invocation.effect_sent_at is not None:
                self._record_uncertain(call)
                return
            self._mark_effect_sent(invocation)
        if tool.blocking:
            release_connection()
        output = run_tool(tool, call, context)
        faults.fault_point(faults.TOOL_DONE)
        self._record_output(call, output, invocation, durable=tool.effect is Effect.WRITE)

    def _live_gate(
        self, call: ProposedCall, tool: Tool | None, invocation: Invocation | None, approved: bool
    ) -> str:
        """HITL-10: at execution the live configuration must still grant this exact tool,
        and an approval covers only the exact call its ticket showed (HITL-5)."""
        refusal = tool_refusal(call.name, granted=self.config.granted, ceiling=self.config.ceiling)
        if refusal:
            return refusal[1].rstrip(".")
        if tool and invocation and invocation.tool_version != tool.version:
            return f"{call.name!r} changed version since it was approved"
        if approved:
            shown = (
                Ticket.objects.filter(
                    run_id=self.lease.run_id, call_id=call.id, status=Ticket.Status.ANSWERED
                )
                .values_list("tool", "arguments_digest")
                .first()
            )
            if shown != (call.name, digest(call.arguments)):
                return "the approval does not match this exact call"
        return ""

    def _run_transactional(
        self, call: ProposedCall, tool: Tool, context: ToolContext, invocation: Invocation
    ) -> None:
        """TOOL-4: the effect and the record of its result commit together or not at all."""
        with transaction.atomic():
            output = run_tool(tool, call, context, savepoint=True)
            written = self._write(
                self._output_items(call, output),
                invocation_updates=[(invocation.pk, completion(output))],
                checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
            )
        self._committed(written)

    def _mark_effect_sent(self, invocation: Invocation) -> None:
        now = timezone.now()
        self._commit(
            [],
            invocation_updates=[
                (
                    invocation.pk,
                    {"effect_sent_at": now, "status": ToolInvocation.Status.EXECUTING},
                )
            ],
        )
        invocation.effect_sent_at = now
        faults.fault_point(faults.EFFECT_SENT)

    def _record_uncertain(self, call: ProposedCall) -> None:
        self._record_result(
            call, ev.UNCERTAIN, UNKNOWN, invocation_status=ToolInvocation.Status.UNCERTAIN
        )

    def _output_items(self, call: ProposedCall, output: ToolOutput) -> Items:
        content, redacted = redact(output.content)
        status = ev.OK if output.ok else ev.ERROR
        extra = (
            {"added_tool_names": output.data["added_tool_names"]}
            if output.ok and "added_tool_names" in output.data
            else {}
        )
        return [
            *self._redaction_items(f"tool:{call.name}", redacted),
            ev.result_item(call.id, call.name, status, content, **extra),
        ]

    def _record_output(
        self, call: ProposedCall, output: ToolOutput, invocation: Invocation, *, durable: bool
    ) -> None:
        self._commit(
            self._output_items(call, output),
            invocation_updates=[(invocation.pk, completion(output))],
            checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
            durable=durable,
        )

    def _record_result(
        self, call: ProposedCall, status: str, content: str, *, invocation_status: str | None = None
    ) -> None:
        invocation = self.invocations.get(call.id)
        updates = []
        if invocation and invocation_status:
            updates.append(
                (invocation.pk, {"status": invocation_status, "completed_at": timezone.now()})
            )
        self._commit(
            [ev.result_item(call.id, call.name, status, content)],
            invocation_updates=updates,
            checkpoints=((Checkpoint.Kind.TOOL_COMPLETED, None),),
        )

    def _redaction_items(self, where: str, kinds: dict[str, int]) -> Items:
        if not kinds:
            return []
        return [(ev.SECRET_REDACTED, {"where": where, "kinds": kinds})]

    # ---- parking and ending ------------------------------------------------------------

    def _park(self, call: ProposedCall) -> str:
        """HITL-1, HITL-2: one committed ticket; the run then holds no worker or lease."""
        tool = REGISTRY.get(call.name)
        assert tool is not None and call.arguments is not None
        config = self.config
        ask = tool.human is Human.INPUT
        ticket = Ticket(
            run_id=self.lease.run_id,
            thread_id=self.lease.thread_id,
            snapshot_id=config.snapshot_id,
            catalog_fingerprint=catalog_fingerprint(self._offered(), self.mode.deferred),
            deadline=timezone.now() + timedelta(seconds=config.approval_timeout_seconds),
            kind=Ticket.Kind.REMOTE_INPUT if ask else Ticket.Kind.TOOL_PERMISSION,
            call_id=call.id,
            tool=call.name,
            arguments=call.arguments,
            arguments_digest=digest(call.arguments),
            question=call.arguments.get("question", "") if ask else "",
            schema=call.arguments.get("schema") if ask else None,
        )
        opened = {
            "correlation_id": str(ticket.correlation_id),
            "call_id": call.id,
            "kind": ticket.kind,
            "tool": call.name,
            "deadline": ticket.deadline.isoformat() if ticket.deadline else None,
        }
        with transaction.atomic():
            ticket.save()
            written = self._write(
                [(ev.TICKET_OPENED, opened)],
                checkpoints=((Checkpoint.Kind.SUSPENSION, None),),
                run_update=self._run_row(Run.Status.AWAITING),
            )
        self._committed(written)
        return AWAITING

    def _release(self) -> str:
        """A worker shutting down hands the run back without spending an attempt."""
        with transaction.atomic():
            written = self._write([], run_update=self._run_row(Run.Status.QUEUED))
            enqueue_wake(self.lease.run_id)
        self._committed(written)
        return RELEASED

    def _finish_failed(
        self,
        code: str,
        detail: str,
        *,
        fields: dict[str, Any] | None = None,
        extra: Items | None = None,
    ) -> str:
        failure = {"code": code, "detail": detail, **(fields or {})}
        return self._finish(
            Run.Status.FAILED, [*(extra or []), (ev.RUN_FAILED, failure)], failure=failure
        )

    def _finish(
        self,
        status: str,
        items: Items,
        *,
        final_reply: str = "",
        failure: dict[str, Any] | None = None,
    ) -> str:
        """The one place a run's terminal state is written."""
        updates: list[tuple[int, dict[str, Any]]] = []
        if status == Run.Status.COMPLETED:
            items = [*items, (ev.RUN_COMPLETED, {"final_reply": final_reply})]
        elif self.state.turn:
            interrupted, updates = self._interrupted(self.state.turn)
            items = [*interrupted, *items]
        self._commit(
            items,
            checkpoints=((Checkpoint.Kind.TERMINAL, None),),
            invocation_updates=updates,
            run_update=lambda: self._run_row(status, final_reply=final_reply, failure=failure),
        )
        return status

    def _interrupted(self, turn: Turn) -> tuple[Items, list[tuple[int, dict[str, Any]]]]:
        """Close the open calls of a run that ends early (`close_open_calls`), and give
        their invocation rows a final status."""
        open_calls = turn.open_calls()
        self._load_invocations(turn, open_calls)
        known = {call.id: self.invocations.get(call.id) for call in open_calls}
        sent = {cid for cid, inv in known.items() if inv and inv.effect_sent_at is not None}
        now = timezone.now()
        updates = [
            (inv.pk, {"status": closed_status(cid in sent), "completed_at": now})
            for cid, inv in known.items()
            if inv is not None
        ]
        return close_open_calls(open_calls, sent), updates

    def _run_row(self, status: str, **changes: Any) -> dict[str, Any]:
        """The run row's cached columns as of the folded state; parking or ending frees
        the lease."""
        return released(
            status,
            **changes,
            steps=self.state.steps,
            tool_calls_used=self.state.tool_calls_used,
            last_sequence=self.state.last_sequence,
        )

    # ---- the one way to write ----------------------------------------------------------

    def _commit(self, items: Items, **writes: Any) -> list[Ev]:
        """Write one durable step and make it this executor's view of the log."""
        written = self._write(items, **writes)
        self._committed(written)
        return written

    def _write(
        self,
        items: Items,
        *,
        checkpoints: Sequence[tuple[str, int | None]] = (),
        continuation: Any = None,
        new_invocations: Sequence[dict[str, Any]] = (),
        invocation_updates: Sequence[tuple[int, dict[str, Any]]] = (),
        run_update: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        durable: bool = True,
    ) -> list[Ev]:
        """Events fenced by the lease, folded into the state, with the checkpoints taken
        on the way and the step's row changes — written as one unit (journal.write)."""
        written = [
            Ev(self.next_sequence + offset, kind, payload, self.lease.run_id)
            for offset, (kind, payload) in enumerate(items)
        ]
        snapshots = self._fold(written, checkpoints, continuation)
        step = journal.Step(
            events=written,
            checkpoints=snapshots,
            new_invocations=list(new_invocations),
            invocation_updates=list(invocation_updates),
            run_update=(run_update() if callable(run_update) else run_update) or {},
        )
        try:
            created = journal.write(self.lease, step, durable=durable)
        except IntegrityError as exc:
            # Another writer appended to this thread: this worker's view is stale.
            self.lease.lost = True
            raise Fenced(str(exc)) from exc
        for row in new_invocations:
            self.invocations[row["call_id"]] = Invocation(
                created[row["call_id"]], row["tool_version"], None
            )
        return written

    def _committed(self, written: list[Ev]) -> None:
        self.events.extend(written)
        self.next_sequence += len(written)
        faults.fault_point(faults.COMMIT)

    def _fold(
        self,
        written: list[Ev],
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

    def _apply(self, event: Ev, continuation: Any) -> None:
        self.state.apply(event)
        if event.type == ev.ASSISTANT:
            self.state.continuation = continuation


def completion(output: ToolOutput) -> dict[str, Any]:
    return {
        "status": (ToolInvocation.Status.COMPLETED if output.ok else ToolInvocation.Status.FAILED),
        "result": {"ok": output.ok, "data": output.data},
        "completed_at": timezone.now(),
    }


@dataclass
class Invocation:
    """What the executor needs of an invocation row between writes."""

    pk: int
    tool_version: str
    effect_sent_at: Any


def run_tool(
    tool: Tool, call: ProposedCall, context: ToolContext, *, savepoint: bool = False
) -> ToolOutput:
    """A failing tool is a model-visible error result, never a crashed run. Inside a
    transaction it runs in a savepoint, so its failure leaves the step's writes usable."""
    try:
        if savepoint:
            with transaction.atomic():
                return tool.execute(call.arguments or {}, context)
        return tool.execute(call.arguments or {}, context)
    except Exception as exc:
        logger.exception("tool %s failed in run %s", tool.name, context.run_id)
        return ToolOutput(f"Error: the tool failed ({type(exc).__name__}: {exc}).", ok=False)


def execute_run(run_id: int, owner: str | None = None) -> str | None:
    """Claim the run and drive it; None when it was not claimable (CLU-1: a duplicate or
    stale wake-up is harmless)."""
    lease = claim(run_id, owner)
    if lease is None:
        return None
    return Executor(lease).drive()
