"""OPS-7: OpenTelemetry, switched on by `OTEL_EXPORTER_OTLP_ENDPOINT` and off by default.

Off, nothing of the SDK is imported and nothing is exported: `enabled()` is the only cost,
and the loop asks it once per drive. On, spans go over OTLP/HTTP (protobuf) in batches
to the collector the standard variables name (`OTEL_EXPORTER_OTLP_ENDPOINT`, or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`),
and Django's requests are traced by `opentelemetry-instrumentation-django`.

`AGENTRUNS_OTEL_CONTENT_CLASS` names the highest data class whose content (message and
tool texts) spans may carry; unset or unknown, spans carry no content at all. What a run
traces is `runtime/traces.py`'s; this module only holds the SDK.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentruns.classes import DataClass, may_leave, parse_class
from agentruns.egress import withheld_marker

SERVICE_NAME = "agentruns"


@dataclass
class _State:
    provider: Any = None
    tracer: Any = None
    content_class: DataClass | None = None
    django: bool = False
    destination: str = ""  # where spans go, as an audit row names it (CG-14)


_state = _State()


def enabled() -> bool:
    return _state.tracer is not None


def content_class() -> DataClass | None:
    """The highest class whose content spans may carry; None: no content."""
    return _state.content_class


def destination() -> str:
    """The exporter's endpoint without credentials or a query (an audit row's name)."""
    return _state.destination


def configure(endpoint: str | None = None, *, instrument_django: bool = True) -> bool:
    """Start exporting if an endpoint is given or set in the environment (the process's
    start, `AgentrunsConfig.ready`); True when tracing is on."""
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not endpoint.strip() or _state.tracer is not None:
        return enabled()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        endpoint.rstrip("/") + "/v1/traces"
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces)))
    _state.provider = provider
    _state.tracer = provider.get_tracer("agentruns")
    _state.content_class = parse_class(os.environ.get("AGENTRUNS_OTEL_CONTENT_CLASS"))
    parts = urlsplit(traces)
    host = parts.netloc.rsplit("@", 1)[-1]  # no user or password in an audit row
    _state.destination = urlunsplit((parts.scheme, host, parts.path, "", ""))
    if instrument_django:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().instrument(tracer_provider=provider, request_hook=_request_hook)
        _state.django = True
    return True


# The attributes the Django instrumentation puts a request's URL (or its query) in, by the
# semantic conventions old and new.
URL_ATTRIBUTES = ("http.url", "url.full", "http.target")
QUERY_ATTRIBUTE = "url.query"


def _request_hook(span: Any, request: Any) -> None:
    """CG-14: a query string is content nobody labelled — it can hold anything a client
    put there — so it leaves with a trace only under a ceiling that takes every class."""
    if may_leave(DataClass.SECRET, content_class()) or not span.is_recording():
        return
    marker = withheld_marker(DataClass.SECRET)
    attributes = getattr(span, "attributes", None) or {}
    for key in URL_ATTRIBUTES:
        value = attributes.get(key)
        if isinstance(value, str) and "?" in value:
            span.set_attribute(key, f"{value.split('?', 1)[0]}?{marker}")
    if attributes.get(QUERY_ATTRIBUTE):
        span.set_attribute(QUERY_ATTRIBUTE, marker)


def flush() -> None:
    if _state.provider is not None:
        _state.provider.force_flush()


def shutdown() -> None:
    """Export what is pending and stop (tests; at exit the SDK does it itself)."""
    if _state.django:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        DjangoInstrumentor().uninstrument()
    if _state.provider is not None:
        _state.provider.shutdown()
    _state.provider = _state.tracer = _state.content_class = None
    _state.django = False
    _state.destination = ""


# A span context travels between processes (a parked run resumes elsewhere) as plain
# values: {"trace_id": hex, "span_id": hex}.


def span_ref(span: Any) -> dict[str, str]:
    context = span.get_span_context()
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def _context(ref: dict[str, str]) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(
        trace_id=int(ref["trace_id"], 16),
        span_id=int(ref["span_id"], 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def start_span(
    name: str,
    attributes: dict[str, Any],
    *,
    parent: dict[str, str] | Any | None = None,
    links: tuple[dict[str, str], ...] = (),
) -> Any:
    """A started span (end it with `end_span`), child of `parent` (a live span or a
    reference from `span_ref`), linked to earlier spans by reference."""
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan

    context = None
    if isinstance(parent, dict):
        context = trace.set_span_in_context(NonRecordingSpan(_context(parent)))
    elif parent is not None:
        context = trace.set_span_in_context(parent)
    return _state.tracer.start_span(
        name,
        context=context,
        attributes={k: v for k, v in attributes.items() if v is not None},
        links=[Link(_context(ref)) for ref in links],
    )


def end_span(span: Any, attributes: dict[str, Any], *, error: str = "") -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if error:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
