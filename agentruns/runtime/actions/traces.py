"""OPS-7: what a run's trace holds, in OpenTelemetry's GenAI semantic conventions.

One `invoke_agent` span per drive of a run, a `chat` span per model turn under it, an
`execute_tool` span per executed call under the turn that proposed it. A run that parks
keeps where its trace stands on its row (`Run.trace_context`); its next drive — after an
approval, on any worker — is a child of the run's first span in the same trace, with a
link to the drive before, and the calls of the parked turn are children of that turn.

Attributes: `gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens`/`output_tokens`, `gen_ai.tool.name`,
`gen_ai.tool.call.id`, `gen_ai.conversation.id` (the thread), and the run's own:
`agentruns.run.id`, `agentruns.configuration`, `agentruns.gate.verdict` (the context
gate's verdict on the send, CG-4/CG-6), `agentruns.outcome`.

Content (`gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`,
`gen_ai.tool.call.arguments`/`result`) only when `AGENTRUNS_OTEL_CONTENT_CLASS` names a
class, and then only what is at or below it (CG-14, `may_leave`): a source's text if its
class is (undeclared places no constraint, TZ-1); the conversation only if the send's
effective class is (it may repeat any source or carried reply, CG-3, CG-12); a reply only
if its label is; a tool's arguments — in the tool span and in every chat span that quotes
the call alike — and its result only if, besides, its output class is. What is held back
is replaced in its field by "withheld: <class>", and a drive that withheld anything is
audited once when it ends (`egress.withheld`, naming the exporter; one row per class held
back, so the audit costs one statement per such drive, none per span). Nothing of this
module runs while tracing is off: the loop holds no `RunTrace`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentruns import events as ev
from agentruns import tracing
from agentruns.classes import DataClass, Enforcement, may_leave, parse_class
from agentruns.egress import EGRESS_WITHHELD_VERDICT, WayOut, withheld_marker
from agentruns.gate.core import Label, effective_source
from agentruns.providers.base import AssistantMessage, Message, ToolResultMessage
from agentruns.runtime.actions.gating import sources
from agentruns.runtime.context import system_texts
from agentruns.runtime.redaction import redact
from agentruns.store.transitions import audits_save, trace_context_of, trace_context_save
from agentruns.tools.registry import REGISTRY

if TYPE_CHECKING:
    from agentruns.runtime.actions.base import RunContext
    from agentruns.runtime.compose import Composed
    from agentruns.runtime.state import ProposedCall, Turn


_within = may_leave  # CG-14: the one rule of every way out, the trace's ceiling its `limit`

# Marks a class held back and returns what the field holds instead (`RunTrace.withhold`).
Withhold = Callable[[DataClass], str]


def _tool_class(name: str) -> DataClass:
    """A tool's output class; an unknown tool's is the strictest."""
    tool = REGISTRY.get(name) or REGISTRY.by_wire(name)
    return tool.output_class if tool else DataClass.SECRET


def _call_part(
    call_id: str, name: str, arguments: Any, limit: DataClass, withhold: Withhold
) -> dict[str, Any]:
    """A proposed call as a span carries it: its arguments only where the tool span would
    carry them (its tool's class within the limit), else the marker (CG-14)."""
    cls = _tool_class(name)
    shown = arguments if _within(cls, limit) else withhold(cls)
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": shown}


class RunTrace:
    """The spans of one drive of a run."""

    def __init__(self, ctx: RunContext, stored: dict[str, Any] | None) -> None:
        self.stored = stored or {}
        config = ctx.config
        self.common = {
            "gen_ai.conversation.id": str(ctx.lease.thread_id),
            "agentruns.run.id": ctx.lease.run_id,
            "agentruns.configuration": config.slug,
        }
        self.provider = config.links[0].provider_kind or None
        self.model = config.model or None
        self.verdict = ""  # the gate's, on the latest send (set by `assert_context`)
        # The latest send's effective class, and whether it is within the limit: kept with
        # the trace, so a parked turn's calls, run on the next drive, are judged by it.
        self.send_class = parse_class(self.stored.get("send_class"))
        self.content_ok = bool(self.stored.get("content_ok"))
        opening = ctx.events[0] if ctx.events else None
        data = opening.data if opening else None
        forked = data.forked_from if isinstance(data, ev.RunForked) else {}
        first = self.stored.get("run")
        if first is None and isinstance(data, ev.RunDelegated):
            first = data.trace_parent  # DEL-5: under the parent's tool span
        previous = self.stored.get("last")
        self.span = tracing.start_span(
            f"invoke_agent {config.slug}",
            {
                **self.common,
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": config.slug,
                "gen_ai.provider.name": self.provider,
                "gen_ai.request.model": self.model,
                "agentruns.resumed": bool(self.stored.get("run")),
                "agentruns.forked_from": forked.get("run"),  # FORK-1
            },
            parent=first,
            links=(previous,) if previous else (),
        )
        self.turn_span: Any = None
        self.turn_ref = self.stored.get("turn")
        self.turn_index = self.stored.get("turn_index")
        self.withheld: set[DataClass] = set()  # CG-14: the classes this drive held back

    def withhold(self, data_class: DataClass) -> str:
        """CG-14: what a field holds in place of content of `data_class`, noted for the
        drive's audit."""
        self.withheld.add(data_class)
        return withheld_marker(data_class)

    def end(self, ctx: RunContext, outcome: str = "", *, error: str = "") -> None:
        last = ctx.events[-1].data if ctx.events else None
        if not error and outcome == ev.TERMINAL_EVENTS[ev.RUN_FAILED]:
            error = (last.code if isinstance(last, ev.RunFailed) else None) or outcome
        tracing.end_span(
            self.span,
            {"agentruns.outcome": outcome or None, "agentruns.gate.verdict": self.verdict or None},
            error=error,
        )
        me = tracing.span_ref(self.span)
        if self.withheld:
            audits_save([self._withheld_row(ctx, cls) for cls in sorted(self.withheld)])
        trace_context_save(
            ctx.lease,
            {
                "run": self.stored.get("run") or me,
                "last": me,
                "turn": self.turn_ref,
                "turn_index": self.turn_index,
                "send_class": self.send_class.label if self.send_class else None,
                "content_ok": self.content_ok,
            },
        )

    def _withheld_row(self, ctx: RunContext, data_class: DataClass) -> dict[str, Any]:
        """CG-14: `egress.withheld`, naming the destination (the exporter) and its ceiling."""
        limit = tracing.content_class()
        return dict(
            verdict=EGRESS_WITHHELD_VERDICT,
            enforcement=Enforcement.ENFORCE.recorded,
            configuration=ctx.config.slug,
            run_id=ctx.lease.run_id,
            zone="",
            ceiling=limit.label if limit else "",
            source_kind=WayOut.TRACE.value,
            source_name=tracing.destination()[:200],
            data_class=data_class.label,
            forced=False,
        )

    # --- a model turn ---------------------------------------------------------------

    def turn(self, ctx: RunContext, turn_index: int, composed: Composed) -> Any:
        attributes: dict[str, Any] = {
            **self.common,
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": self.model,
            "agentruns.turn": turn_index,
        }
        limit = tracing.content_class()
        if limit is not None:
            listed = sources(ctx)
            effective = effective_source(listed)
            self.send_class = effective.data_class if effective else None
            self.content_ok = _within(self.send_class, limit)
            instructions = [
                {"type": "text", "content": self._instruction(text, source.data_class, limit)}
                for source in listed
                if source.carried_from is None
                for text in system_texts([source])
            ]
            attributes["gen_ai.system_instructions"] = json.dumps(instructions)
            if self.content_ok:
                messages = [_message(m, limit, self.withhold) for m in composed.messages]
                attributes["gen_ai.input.messages"] = json.dumps(messages)
            else:  # CG-14: the field says what it held back, never a word of it
                assert effective is not None and effective.data_class is not None
                attributes["gen_ai.input.messages"] = self.withhold(effective.data_class)
        span = tracing.start_span(f"chat {self.model or ''}".strip(), attributes, parent=self.span)
        self.turn_span, self.turn_ref, self.turn_index = span, tracing.span_ref(span), turn_index
        return span

    def turn_done(
        self, ctx: RunContext, span: Any, reply: Any, served: Any, label: Label | None = None
    ) -> None:
        """`reply` and `served` (the link) when the model answered, else None: the run
        ended (its failure is the log's last event) or the turn is composed again.
        `label`: the reply's (CG-12); a reply labelled above the limit is not exported."""
        attributes: dict[str, Any] = {"agentruns.gate.verdict": self.verdict or None}
        error = ""
        if reply is None:
            last = ctx.events[-1].data if ctx.events else None
            if isinstance(last, ev.RunFailed):
                error = last.code or "failed"
        else:
            usage = reply.token_usage
            attributes.update(
                {
                    "gen_ai.provider.name": served.provider_kind or self.provider,
                    "gen_ai.response.model": reply.model or None,
                    "gen_ai.usage.input_tokens": usage["input_tokens"],
                    "gen_ai.usage.output_tokens": usage["output_tokens"],
                    "agentruns.served_by": served.slug,
                }
            )
            limit = tracing.content_class()
            cls = label.data_class if label else None
            if self.content_ok and limit is not None and _within(cls, limit):
                calls = [
                    _call_part(c.id, c.name, c.arguments, limit, self.withhold)
                    for c in reply.tool_calls
                ]
                text = [{"type": "text", "content": redact(reply.text)[0]}] if reply.text else []
                output = [{"role": "assistant", "parts": [*text, *calls]}]
                attributes["gen_ai.output.messages"] = json.dumps(output)
            elif limit is not None and cls is not None:
                attributes["gen_ai.output.messages"] = self.withhold(cls)
        tracing.end_span(span, attributes, error=error)

    # --- a tool call ------------------------------------------------------------------

    def tool(self, ctx: RunContext, turn: Turn, call: ProposedCall) -> Any:
        parent: Any = self.span
        if self.turn_index == turn.turn_index:
            parent = self.turn_span or self.turn_ref or self.span
        attributes: dict[str, Any] = {
            **self.common,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "agentruns.turn": turn.turn_index,
        }
        limit = tracing.content_class()
        if limit is not None:
            held = self._tool_withheld(call.name, limit)
            shown = json.dumps(call.arguments) if held is None else self.withhold(held)
            attributes["gen_ai.tool.call.arguments"] = shown
        return tracing.start_span(f"execute_tool {call.name}", attributes, parent=parent)

    def tool_done(self, ctx: RunContext, span: Any, call: ProposedCall) -> None:
        result = next(
            (
                data
                for e in reversed(ctx.events)
                if isinstance(data := e.data, ev.ToolResult) and data.call_id == call.id
            ),
            None,
        )
        status = result.status if result else ""
        attributes: dict[str, Any] = {"agentruns.tool.status": status or None}
        limit = tracing.content_class()
        if result and limit is not None:
            held = self._tool_withheld(call.name, limit)
            content = result.content
            attributes["gen_ai.tool.call.result"] = content if held is None else self.withhold(held)
        error = status if status and status != ev.OK else ""
        tracing.end_span(span, attributes, error=error)

    def _tool_withheld(self, name: str, limit: DataClass) -> DataClass | None:
        """None when a call's words leave with its span, else the class they are held back
        for: the tool's, or the send's when the model that wrote them read something above
        the limit (CG-12)."""
        cls = _tool_class(name)
        if not _within(cls, limit):
            return cls
        return None if self.content_ok else max(cls, self.send_class or cls)

    def _instruction(self, text: str, data_class: DataClass | None, limit: DataClass) -> str:
        """A source's text, or the marker where its class is above the limit."""
        if data_class is None or _within(data_class, limit):
            return redact(text)[0]
        return self.withhold(data_class)


def _message(message: Message, limit: DataClass, withhold: Withhold) -> dict[str, Any]:
    """One message of the conversation in the GenAI conventions' shape; a tool result
    whose tool's output class is above the limit is withheld."""
    if isinstance(message, ToolResultMessage):
        cls = _tool_class(message.name)
        response = message.content if _within(cls, limit) else withhold(cls)
        part = {"type": "tool_call_response", "id": message.call_id, "response": response}
        return {"role": "tool", "parts": [part]}
    if isinstance(message, AssistantMessage):
        parts: list[dict[str, Any]] = [{"type": "text", "content": message.text}]
        parts += [
            _call_part(c.id, c.name, c.arguments, limit, withhold) for c in message.tool_calls
        ]
        return {"role": "assistant", "parts": parts}
    return {"role": "user", "parts": [{"type": "text", "content": message.text}]}


def begin(ctx: RunContext) -> RunTrace | None:
    """The drive's trace, or None while tracing is off (the only check the loop makes)."""
    if not tracing.enabled():
        return None
    trace = RunTrace(ctx, trace_context_of(ctx.lease.run_id))
    ctx.trace = trace
    return trace
