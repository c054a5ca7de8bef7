"""Read-side queries shared by the admin, the pages and the API. Reads only: who may see
what is `agentruns.policy`'s, and nothing here writes or commits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from reversion.models import Version

from agentruns import events as ev
from agentruns.classes import Enforcement, parse_class
from agentruns.events import LogEntry
from agentruns.gate.audit import current_enforcement
from agentruns.gate.core import (
    SKILL,
    SNIPPET,
    SYSTEM_PROMPT,
    ConfigView,
    Source,
    compose_sources,
    reachable_zone,
)
from agentruns.gate.lookups import (
    SourceRows,
    carried_for_send,
    carried_identities,
    config_view,
    config_views,
    forced_for_composition,
    forced_for_resume,
    forced_identities,
    source_rows,
)
from agentruns.gate.readout import GrantedTool, readout
from agentruns.models import Configuration, Event, Run, Skill, Snippet, Ticket, ToolInvocation
from agentruns.policy import (
    answerable_tickets,
    decidable_changes,
    is_approver,
    routed_calls,
    visible_runs,
)
from agentruns.providers.base import Message
from agentruns.runtime.compose import LogView, log_view, next_request
from agentruns.runtime.config import build_runtime_config, runtime_config
from agentruns.runtime.fork import carried_of, delegated_floor, floor_of
from agentruns.store import estimated_count, store
from agentruns.store.log import log_entries, logs_by_thread
from agentruns.tools.mcp.pinned import sync_pinned
from agentruns.tools.policy import INPUT, PERMISSION, granted_tools, needs_human

WAITS_FOR: dict[str | None, str] = {PERMISSION: "approval", INPUT: "an answer"}


def granted(configuration: Configuration, generation: int | None = None) -> list[GrantedTool]:
    """The tools the configuration grants, MCP tools pinned now included (MCP-2, MCP-4;
    `generation`: the live catalog generation, when the caller read it)."""
    sync_pinned(generation)
    exempt = frozenset(configuration.approval_exempt_tools or [])
    return [
        (
            tool.name,
            tool.output_class,
            tool.effect.value,
            WAITS_FOR.get(needs_human(tool, exempt), ""),
        )
        for tool in granted_tools(configuration.allowed_tools or [])
    ]


def configuration_readout(
    *,
    configuration: Configuration,
    forced_snippet_ids: Iterable[int] | None = None,
    forced_skill_ids: Iterable[int] | None = None,
) -> dict:
    """CG-10 for a configuration, optionally with a forced set composed as a run would."""
    view = config_view(configuration)
    snippets, skills, dropped = forced_for_composition(forced_snippet_ids, forced_skill_ids)
    sources = compose_sources(view, snippets, skills)
    tools = granted(configuration)
    data = readout(view, sources, current_enforcement(), tools=tools)
    data["dropped"] = [item.as_dict() for item in dropped]
    data["delegates"] = _delegate_rows(
        _delegates([configuration])[configuration.pk], data["effective_class"]
    )
    return data


def _delegate_rows(delegates: Sequence[tuple[str, Any]], effective: str) -> list[dict]:
    """DEL-1, DEL-2: what each delegate (slug, reachable zone) may receive and whether a
    child of it would be refused, its sends carrying this configuration's class."""
    floor = parse_class(effective)
    return [
        {
            "configuration": slug,
            "zone": zone.label,
            "ceiling": zone.ceiling.label,
            "refused": floor is not None and floor > zone.ceiling,
        }
        for slug, zone in delegates
    ]


def _delegates(configurations: Iterable[Configuration]) -> dict[int, list[tuple[str, Any]]]:
    """Each configuration's delegates (by id) as (slug, reachable zone): all of them read
    in one query, and their views in 3 more only when there are any (PERF-8)."""
    by_id: dict[int, list[tuple[str, Any]]] = {c.pk: [] for c in configurations}
    links = list(
        Configuration.delegates.through.objects.filter(from_configuration__in=list(by_id))
        .select_related("to_configuration__provider")
        .order_by("to_configuration__slug")
    )
    views = config_views(link.to_configuration for link in links)
    for link in links:
        delegate = link.to_configuration
        by_id[link.from_configuration_id].append(
            (delegate.slug, reachable_zone(views[delegate.pk]))
        )
    return by_id


def run_sources(run: Run) -> tuple[ConfigView, list[Source]]:
    """The live configuration and the sources a run's next send carries (RG-2), with what
    a fork carried from its original (FORK-1; its thread's log opens with `run.forked`)."""
    view = config_view(run.configuration)
    opening = _openings([run]).get(run.thread_id, [])
    return view, _sources(view, run, carried_of(opening), delegated_floor(opening))


@dataclass(frozen=True)
class Prefix:
    """A copy of `run`'s thread `log` up to sequence `upto` (FORK-1's fork point, GOV-4's
    point before the run's first model turn)."""

    log: Sequence[LogEntry]
    run: Run
    upto: int


@dataclass(frozen=True)
class Carried:
    """What a copy of a thread's prefix carries: the sources of the runs it copies by
    identity ({kind, id, from}, CG-13) and a child's thread's floor ({run, class, origin},
    DEL-2) or None."""

    sources: list[dict[str, Any]]
    floor: dict[str, Any] | None = None


def prefix_sources(prefix: Prefix) -> Carried:
    """CG-13, FORK-1, GOV-4: what a copy of a thread's prefix carries — the sources of
    every run with an event there and of the run copied (its configuration's, its forced
    set, what it carried itself), once each, named by the run they came from; and the
    floor its thread is held to, a child's (DEL-2)."""
    return prefixes_sources([prefix])[0]


def prefixes_sources(prefixes: Sequence[Prefix]) -> list[Carried]:
    """`prefix_sources` of each prefix, read in a constant number of queries however many
    there are (GOV-4: a replay of 100 runs)."""
    copied = [
        {p.run.pk, *(e.run_id for e in p.log if e.run_id is not None and e.sequence <= p.upto)}
        for p in prefixes
    ]
    runs = Run.objects.select_related("configuration__provider").in_bulk(set().union(*copied))
    sources = _runs_sources(list(runs.values()))
    found = []
    for prefix, ids in zip(prefixes, copied, strict=True):
        merged: dict[tuple[str, int], dict[str, Any]] = {}
        for pk in sorted(ids):
            for identity, source in sources.get(pk, {}).items():
                merged.setdefault(identity, source)
        found.append(Carried(list(merged.values()), floor_of(prefix.log)))
    return found


def _runs_sources(runs: Sequence[Run]) -> dict[int, dict[tuple[str, int], dict[str, Any]]]:
    """Each run's sources by identity ({kind, id, from}): 3 queries for the
    configurations, 1 for the openings, at most 3 for the forced and carried rows."""
    views = config_views(run.configuration for run in runs)
    openings = _openings(runs)
    carried = {run.pk: carried_of(openings.get(run.thread_id, [])) for run in runs}
    wanted = []
    for run in runs:
        wanted += forced_identities(run.forced_snippet_ids, run.forced_skill_ids)
        wanted += [(kind, pk) for kind, pk, _ in carried_identities(carried[run.pk])]
    rows = source_rows(wanted)
    found: dict[int, dict[tuple[str, int], dict[str, Any]]] = {}
    for run in runs:
        mine = found.setdefault(run.pk, {})
        view = views[run.configuration_id]
        for source in _sources(view, run, carried[run.pk], rows=rows):
            origin = source.carried_from or run.pk
            mine.setdefault(source.identity, {"kind": source.kind, "id": source.id, "from": origin})
    return found


def _sources(
    view: ConfigView,
    run: Run,
    carried: Sequence[dict],
    replies: Sequence[Source] = (),
    rows: SourceRows | None = None,
) -> list[Source]:
    snippets, skills = forced_for_resume(run.forced_snippet_ids, run.forced_skill_ids, rows)
    carried_sources = carried_for_send(carried, rows)
    return list(compose_sources(view, snippets, skills, carried_sources, replies))


# The openings of a thread that carries another run's sources: a fork's (FORK-1), a
# replay's (GOV-4), a child's (DEL-2).
OPENINGS = (ev.RUN_FORKED, ev.RUN_REPLAYED, ev.RUN_DELEGATED)


def _openings(runs: Sequence[Run]) -> dict[int, list[LogEntry]]:
    """FORK-1, GOV-4, DEL-2: the event each fork's, replay's or child's thread opens with,
    which says what it carries (`carried_of`, `delegated_floor`), by thread id, in one
    query for all."""
    openings = Event.objects.filter(
        thread__in={run.thread_id for run in runs}, sequence=1, type__in=OPENINGS
    )
    return logs_by_thread(openings)


def thread_log(run: Run, before: int | None = None) -> list[LogEntry]:
    rows = Event.objects.filter(thread=run.thread_id)
    if before is not None:
        rows = rows.filter(sequence__lt=before)
    return log_entries(rows)


def run_next_send(run: Run) -> LogView:
    """What the run's next send would carry of its log, by the loop's own recipe
    (`log_view`) against the live configuration and classes: its `withheld` results
    (MCP-4) and the reachable `zone`."""
    return run_next_sends([run])[run.pk]


def run_next_sends(runs: Sequence[Run], generation: int | None = None) -> dict[int, LogView]:
    """`run_next_send` of each run (by id): their threads' logs in one query, each
    configuration as the loop caches it for the live catalog generation (read unless
    given; PERF-8: the inbox shows one on every card)."""
    if generation is None:
        generation = store().catalog_generation()
    threads = {run.thread_id for run in runs}
    logs = logs_by_thread(Event.objects.filter(thread__in=threads))
    return {
        run.pk: log_view(
            logs.get(run.thread_id, []), runtime_config(run.configuration_id, generation)
        )
        for run in runs
    }


def run_readout(run: Run) -> dict[str, Any]:
    """CG-10 for a run: the live configuration plus the run's forced set (RG-2), the
    labelled replies its next send carries (CG-12), its granted tools and the results
    that send would withhold (MCP-4), and what each delegate may receive (DEL-1, DEL-2)."""
    return run_readouts([run])[run.pk]


def run_readouts(runs: Iterable[Run]) -> dict[int, dict[str, Any]]:
    """`run_readout` of each run (by id), the configurations read in 3 queries together
    (PERF-8: the inbox shows a readout on every card), their delegates in one more
    (without them a delegating run's page and inbox card said "No tools" above its
    agent.delegate calls)."""
    runs = list(runs)
    views = config_views(run.configuration for run in runs)
    openings = _openings(runs)
    enforcement = current_enforcement()
    generation = store().catalog_generation()
    configurations = {run.configuration_id: run.configuration for run in runs}
    tools = {pk: granted(c, generation) for pk, c in configurations.items()}
    next_sends = run_next_sends(runs, generation)
    delegates = _delegates(configurations.values())
    out = {}
    for run in runs:
        view = views[run.configuration_id]
        next_send = next_sends[run.pk]
        opening = openings.get(run.thread_id, [])
        labelled = (*delegated_floor(opening), *next_send.replies)
        out[run.pk] = readout(
            view,
            _sources(view, run, carried_of(opening), labelled),
            enforcement,
            tools=tools[run.configuration_id],
            withheld=next_send.withheld,
            results=next_send.results,
        )
        data = out[run.pk]
        data["delegates"] = _delegate_rows(delegates[run.configuration_id], data["effective_class"])
    return out


def inbox_count(user: Any) -> int:
    """What the viewer's inbox holds for them to decide (HITL-9, GOV-3): the tickets they
    may answer and the held catalog changes they may approve, in two statements however
    many there are (PERF-8). The nav's badge, the home page's and the cards' poll all show
    this one number."""
    return answerable_tickets(user).count() + decidable_changes(user).count()


EXACT_COUNT_UP_TO = 10_000


def bounded_count(rows: QuerySet) -> tuple[int, bool]:
    """(how many rows a list has, whether that is exact) for its pagination: exact up to
    EXACT_COUNT_UP_TO, the planner's estimate beyond (PERF-8: counting a year's million
    runs costs more than showing a page of them)."""
    rows = rows.order_by()
    exact = rows[: EXACT_COUNT_UP_TO + 1].count()
    if exact <= EXACT_COUNT_UP_TO:
        return exact, True
    estimate = estimated_count(rows)
    if estimate is None:
        return rows.count(), True
    return max(exact, estimate), False


# UI-7: the task a new user's first click runs (the demo's multi-tool-demo completes it),
# and any configuration's that names none of its own.
EXAMPLE_TASK = "Write the standup note"


def example_task(configuration: Configuration | None) -> str:
    return (configuration.example_task if configuration else "") or EXAMPLE_TASK


def task_for(
    typed: str | None, configuration: Configuration | None, among: Iterable[Configuration]
) -> str:
    """UI-7: the task box after a change of configuration. What the user typed stays; a
    fresh form, or a box still holding the example of one of `among`, shows this
    configuration's example (so its runs say what it is for)."""
    if typed is None or typed in {example_task(c) for c in among}:
        return example_task(configuration)
    return typed


@dataclass(frozen=True)
class ConfigurationChoice:
    """An option of a page's configuration select: what it needs to run, in its label."""

    slug: str
    label: str
    needs: str


def configuration_choices(configurations: Iterable[Configuration]) -> list[ConfigurationChoice]:
    choices = []
    for configuration in configurations:
        provider = configuration.provider
        needs = provider.requirement if provider else "needs a provider"
        label = f"{configuration.slug} — {configuration.name}"
        choices.append(
            ConfigurationChoice(configuration.slug, label + (f" · {needs}" if needs else ""), needs)
        )
    return choices


def preselected(choices: Sequence[ConfigurationChoice]) -> str:
    """UI-7: the first click works offline: AGENTRUNS_DEFAULT_CONFIGURATION when it needs
    nothing from outside this host, else the first that does not, else the first."""
    offline = [choice.slug for choice in choices if not choice.needs]
    wanted = settings.AGENTRUNS_DEFAULT_CONFIGURATION
    if wanted in offline:
        return wanted
    return next(iter(offline), choices[0].slug if choices else "")


@dataclass(frozen=True)
class StartForm:
    """What a form that starts a run shows (UI-7): its configuration select, the
    configuration selected, and the task box."""

    choices: list[ConfigurationChoice]
    configuration: Configuration | None
    task: str


def start_form(
    configurations: Sequence[Configuration], *, slug: str | None, typed: str | None
) -> StartForm:
    """UI-7, the one rule of every start form (the playground's, the runs page's *Start a
    run*): the configuration asked for, else one that works offline (`preselected`), and
    its example task unless the user typed their own (`task_for`)."""
    choices = configuration_choices(configurations)
    slug = slug or preselected(choices)
    configuration = next((c for c in configurations if c.slug == slug), None)
    return StartForm(choices, configuration, task_for(typed, configuration, configurations))


def mode_names(configuration: Configuration) -> list[str]:
    """DEF-1: the configuration's modes by name, its default first."""
    return [mode.name for mode in build_runtime_config(configuration).modes]


@dataclass(frozen=True)
class TurnRequest:
    """What one model turn was sent, as the loop composed it."""

    mode: str
    system: tuple[str, ...]
    messages: tuple[Message, ...]
    tools: tuple[str, ...]


def turn_requests(
    run: Run, sequences: Sequence[int], records: Sequence[ev.SentRecord | None] = ()
) -> list[TurnRequest]:
    """For each model turn (by its event's sequence in the thread's log), the request the
    loop composed from the log before it, with the configuration's sources (RG-2). A
    turn's own record (`records`, GOV-2) says what it withheld and where it went; a turn
    logged before turns kept one is composed against the live configuration."""
    if not sequences:
        return []
    config = build_runtime_config(run.configuration)
    _, sources = run_sources(run)
    log = thread_log(run, before=max(sequences))
    enforce = current_enforcement() is Enforcement.ENFORCE  # CG-6: observing withholds nothing
    found = []
    for i, sequence in enumerate(sequences):
        record = records[i] if i < len(records) else None
        record = record if record is not None and record.zone else None
        before = [e for e in log if e.sequence < sequence]
        view = log_view(before, config, enforce=enforce, recorded=record)
        carried = as_sent(sources, record) if record else sources
        composed = next_request(view, sources=carried)  # the loop's own recipe (FS-3)
        tools = tuple(t.name for t in composed.tools)
        found.append(TurnRequest(view.mode.name, composed.system, composed.messages, tools))
    return found


VERSIONED_TEXT = {
    SNIPPET: (Snippet, "text"),
    SKILL: (Skill, "instructions"),
    SYSTEM_PROMPT: (Configuration, "system_prompt"),
}


def as_sent(sources: Sequence[Source], record: ev.SentRecord) -> list[Source]:
    """GOV-2: the sources a past turn carried (its record names each with its version),
    each with its text at that version (django-reversion keeps it), not today's."""
    recorded = record.sources
    found = []
    for source in sources:
        version = recorded.get(f"{source.kind}:{source.name}")
        if version is None and source.version:
            continue  # not carried by that turn: added since
        if version is not None and version != source.version:
            source = replace(source, text=_text_at(source, version), version=version)
        found.append(source)
    return found


def _text_at(source: Source, version: int) -> str:
    model, field = VERSIONED_TEXT[source.kind]
    for kept in Version.objects.get_for_object_reference(model, source.id):
        if kept.field_dict.get("version") == version:
            return str(kept.field_dict.get(field, ""))
    return f"(the text of {source.name} version {version} was not kept)"


def uncertain_invocations(user: Any) -> QuerySet[ToolInvocation]:
    """TOOL-4: writes whose outcome is unknown, shown to approvers (routed as tickets are,
    HITL-14) and never re-run."""
    if not is_approver(user):
        return ToolInvocation.objects.none()
    return (
        ToolInvocation.objects.filter(
            routed_calls(user), uncertain=True, run__in=visible_runs(user)
        )
        .select_related("run", "run__configuration")
        .order_by("-effect_sent_at")[:200]
    )


def waiting_on(run: Run) -> list[int]:
    """DEL-1: the child runs a parent waits for, in its calls' order: several delegations
    of one turn open a ticket each. The run API's `waiting_on` and the run page's "Waiting
    for its child runs"."""
    if run.status != Run.Status.AWAITING:
        return []
    waiting = run.tickets.filter(status=Ticket.Status.ACTIVE, kind=Ticket.Kind.DELEGATION)
    return [pk for pk in waiting.order_by("id").values_list("child_id", flat=True) if pk]


def delegation_cycle(configuration_id: int | None, delegate_ids: Iterable[int]) -> bool:
    """DEL-3: whether a configuration with these delegates could reach itself through
    `delegates` (a new one, without an id, reaches nothing yet)."""
    links = Configuration.delegates.through.objects
    seen: set[int] = set()
    frontier = set(delegate_ids)
    while frontier and configuration_id is not None:
        if configuration_id in frontier:
            return True
        seen |= frontier
        found = links.filter(from_configuration_id__in=frontier)
        frontier = set(found.values_list("to_configuration_id", flat=True)) - seen
    return False
