"""Pure context-gate decisions (CG-1..CG-7, TZ-4, FS-1, FS-2). No I/O, no Django."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentruns.classes import DataClass, Zone, least_trusted, parse_class, parse_zone
from agentruns.frozen import quick

SYSTEM_PROMPT = "system_prompt"
SNIPPET = "snippet"
SKILL = "skill"
REPLY = "reply"  # CG-12: what the model wrote, labelled with the class of what it read
# DEL-2: a child's task, labelled with its parent's effective class when it delegated.
DELEGATED = "delegation"


@quick
@dataclass(frozen=True, slots=True)
class Source:
    """One piece of context a send carries. `text` is never read by the gate."""

    kind: str
    id: int
    name: str
    declared: str = ""
    text: str = field(default="", repr=False, compare=False)
    title: str = ""
    forced: bool = False
    # FORK-1: a source of the run a fork copied its context from. Its text is not sent
    # (the fork's own configuration writes the system context), but the copied transcript
    # may carry what the model made of it, so its class still binds.
    carried_from: int | None = None
    version: int = field(default=0, compare=False)  # GOV-2: the record's version, as read
    # CG-12: what set a reply's class ({kind, name} of the source or result its send's
    # high-water mark came from); None for every other kind.
    origin: tuple[str, str] | None = None

    @property
    def data_class(self) -> DataClass | None:
        return parse_class(self.declared)

    @property
    def carried(self) -> dict[str, int]:
        """FORK-1: `carried_from` as a field of a refusal or a readout row, when set."""
        return {"carried_from": self.carried_from} if self.carried_from else {}

    @property
    def identity(self) -> tuple[str, int]:
        return (self.kind, self.id)

    @property
    def set_by(self) -> tuple[str, str]:
        """CG-12: the origin a label made from this source names."""
        return self.origin or (self.kind, self.name)

    def describe(self) -> str:
        if self.kind in (REPLY, DELEGATED):
            kind, name = self.set_by
            origin = f'{kind.replace("_", " ")} "{name}"'
            what = f"reply of {self.name}" if self.kind == REPLY else self.name
            return f"{what} (set by {origin}, {self.declared})"
        carried = f" (carried from run #{self.carried_from})" if self.carried_from else ""
        return f'{self.kind.replace("_", " ")} "{self.name}"{carried}'


@dataclass(frozen=True)
class Hop:
    """One configuration of the fallback chain as the gate sees it (TZ-4): its slug and its
    provider's zone. How to reach the provider is the providers' business (`Link`)."""

    slug: str
    provider_zone: str | None = None  # raw stored value; None = no provider
    # GOV-2: the versions of the configuration and its provider this hop was read at.
    version: int = field(default=0, compare=False)
    provider_version: int = field(default=0, compare=False)

    @property
    def zone(self) -> Zone:
        return parse_zone(self.provider_zone)


@dataclass(frozen=True)
class ConfigView:
    """A configuration as plain values, with its own active sources in CG-1 order."""

    id: int
    slug: str
    name: str
    primary: Hop
    fallbacks: tuple[Hop, ...] = ()
    system_prompt: str = ""
    system_prompt_class: str = ""
    snippets: tuple[Source, ...] = ()
    skills: tuple[Source, ...] = ()

    @property
    def chain(self) -> tuple[Hop, ...]:
        """Every configuration the walk sees; the dispatcher attempts only these."""
        return (self.primary, *self.fallbacks)


def compose_sources(
    config: ConfigView,
    forced_snippets: Sequence[Source] | None = None,
    forced_skills: Sequence[Source] | None = None,
    carried: Sequence[Source] | None = None,
    replies: Sequence[Source] = (),
) -> tuple[Source, ...]:
    """CG-1: the fixed order; a forced source the configuration carries is listed once, and
    so is a source a fork carried from its original (FORK-1), which comes last. The
    replies the send carries (CG-12) come first, in thread order: on a tie (CG-3) a live
    source is named, which a remedy can act on, and a reply only when it is stricter."""
    listed: list[Source] = list(replies)
    if config.system_prompt.strip():
        listed.append(
            Source(
                kind=SYSTEM_PROMPT,
                id=config.id,
                name=config.slug,
                title=config.name,
                declared=config.system_prompt_class,
                text=config.system_prompt,
                version=config.primary.version,
            )
        )
    listed.extend(config.snippets)
    listed.extend(config.skills)
    seen = {source.identity for source in listed}
    for added in (*(forced_snippets or ()), *(forced_skills or ()), *(carried or ())):
        if added.identity not in seen:
            seen.add(added.identity)
            listed.append(added)
    return tuple(listed)


def effective_source(sources: Sequence[Source]) -> Source | None:
    """CG-3: the strictest declared source; on a tie the later one; undeclared never wins."""
    winner: Source | None = None
    for source in sources:
        declared = source.data_class
        if declared is None:
            continue
        if winner is None or declared >= winner.data_class:  # type: ignore[operator]
            winner = source
    return winner


def reachable_zone(config: ConfigView) -> Zone:
    """TZ-4: the least trusted zone of the provider and each fallback, one level deep."""
    return least_trusted([link.zone for link in config.chain])


class Verdict(StrEnum):
    UNDECLARED = "undeclared"
    PERMITTED = "permitted"
    REFUSED = "refused"


@quick
@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    configuration: str
    source: Source | None = None
    zone: Zone | None = None

    @property
    def data_class(self) -> DataClass | None:
        return self.source.data_class if self.source else None

    @property
    def ceiling(self) -> DataClass | None:
        return self.zone.ceiling if self.zone else None

    @property
    def refused(self) -> bool:
        return self.verdict is Verdict.REFUSED


def decide(config: ConfigView, sources: Sequence[Source]) -> Decision:
    """CG-4: a value, never a side effect. Nothing declared means no zone is looked up."""
    source = effective_source(sources)
    if source is None:
        return Decision(Verdict.UNDECLARED, config.slug)
    zone = reachable_zone(config)
    assert source.data_class is not None
    verdict = Verdict.PERMITTED if zone.permits(source.data_class) else Verdict.REFUSED
    return Decision(verdict, config.slug, source, zone)


def refusal_fields(decision: Decision) -> dict:
    """CG-7's structured fields, as a refused run's failure carries them (CG-8)."""
    assert decision.source and decision.zone and decision.data_class
    origin = decision.source.origin
    return {
        "configuration": decision.configuration,
        "zone": decision.zone.label,
        "ceiling": decision.zone.ceiling.label,
        "source_kind": decision.source.kind,
        "source_name": decision.source.name,
        "data_class": decision.data_class.label,
        "forced": decision.source.forced,
        **decision.source.carried,
        **({"origin": {"kind": origin[0], "name": origin[1]}} if origin else {}),
    }


def refusal_message(decision: Decision) -> str:
    """CG-7: names configuration, zone, ceiling, the deciding source and its class only."""
    f = refusal_fields(decision)
    source = decision.source.describe()  # type: ignore[union-attr]
    return (
        f'Configuration "{f["configuration"]}" may not send this context: {source} is '
        f"declared {f['data_class']}, above the ceiling {f['ceiling']} of the reachable "
        f"zone {f['zone']}. Remedies: raise the provider's trust zone (or of the fallback "
        f"that lowers it), remove {source} from the context, or correct its data class."
    )


# MCP-4: what a tool returned is a source of every later send, with its tool's class.
TOOL_RESULT = "tool_result"
SUMMARY = "summary"  # a compaction's summary of earlier results


@quick
@dataclass(frozen=True, slots=True)
class ResultSource:
    """A tool result in the context a send carries (or a summary of some, carrying the
    strictest class of the results it summarised); `tool` names the tool whose class it
    has. Never its text: the gate reads classes only."""

    sequence: int
    kind: str
    tool: str
    data_class: DataClass | None

    def describe(self) -> str:
        if self.kind == SUMMARY:
            return f"the summary of earlier results (of {self.tool})"
        return f"the result of {self.tool}"


def withheld(results: Sequence[ResultSource], ceiling: DataClass) -> tuple[ResultSource, ...]:
    """MCP-4: the results the reachable zone may not take now. They are withheld from the
    send, which still carries one result per call (LOOP-7); nothing else is refused. A
    class raised, a zone lowered or a fork onto another configuration since the result
    came back all land here: the rule reads the live class and the live ceiling."""
    return tuple(r for r in results if r.data_class is not None and r.data_class > ceiling)


def withheld_note(result: ResultSource, zone: Zone) -> str:
    """What the model reads in place of a withheld result: the tool and its class, never
    a word of the result."""
    assert result.data_class is not None
    return (
        f"Withheld by the context gate: {result.describe()} is classed "
        f"{result.data_class.label}, above the ceiling {zone.ceiling.label} of this "
        f"configuration's reachable zone ({zone.label}). It stays in the run's log."
    )


@quick
@dataclass(frozen=True, slots=True)
class Label:
    """CG-12: the class a model reply (or a compaction's summary) carries — the high-water
    mark of the send that produced it — and the source or result that set it. Stored as
    one field of the event the step writes anyway (`as_dict`)."""

    data_class: DataClass
    kind: str
    name: str

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.data_class.label, "origin": {"kind": self.kind, "name": self.name}}


def parse_label(raw: object) -> Label | None:
    """A stored label; anything unreadable is no label (the content counts as unlabelled)."""
    if not isinstance(raw, dict):
        return None
    data_class = parse_class(raw.get("class"))
    origin = raw.get("origin")
    if not isinstance(origin, dict):
        origin = {}
    if data_class is None:
        return None
    return Label(data_class, str(origin.get("kind", "")), str(origin.get("name", "")))


def high_water(source: Source | None, carried: Sequence[ResultSource]) -> Label | None:
    """CG-12: the strictest class a send carried — its deciding source (a carried reply
    hands on its own origin) or a carried result, whichever is stricter; None when
    nothing it carried was declared."""
    best = Label(source.data_class, *source.set_by) if source and source.data_class else None
    for result in carried:
        if result.data_class and (best is None or result.data_class > best.data_class):
            best = Label(result.data_class, result.kind, result.tool)
    return best


def reply_source(sequence: int, name: str, label: Label) -> Source:
    """CG-12: a carried reply as a source of a later send ("turn N": "reply of turn N")."""
    return Source(REPLY, sequence, name, label.data_class.label, origin=(label.kind, label.name))


def delegated_source(parent: int, label: Label) -> Source:
    """DEL-2: a child run's floor, its parent's effective class when it delegated (the
    label of the reply that made the call: everything that parent's model had read), as a
    source of every send of the child, naming what set it."""
    origin = (label.kind, label.name)
    return Source(
        DELEGATED, parent, f"delegated by run {parent}", label.data_class.label, origin=origin
    )
