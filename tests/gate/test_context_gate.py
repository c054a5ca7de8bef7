"""The context gate (CG-1..CG-7): composition, folding, deciding, asserting, refusing."""

from __future__ import annotations

import inspect
import logging

import pytest

from agentruns.classes import Enforcement, parse_enforcement
from agentruns.errors import ContextRefused
from agentruns.gate import core
from agentruns.gate.audit import context_assert, current_enforcement
from agentruns.gate.core import (
    SKILL,
    SNIPPET,
    SYSTEM_PROMPT,
    Verdict,
    compose_sources,
    decide,
    effective_source,
    refusal_fields,
    refusal_message,
)
from agentruns.models import GateAudit
from agentruns.selectors import configuration_readout
from tests.support.catalog import make_configuration, make_provider, make_snippet, save_audits
from tests.support.gate_values import link, skill, source, view

ENFORCEMENT = "AGENTRUNS_DATA_CLASS_ENFORCEMENT"


def names(sources):
    return [(s.kind, s.name) for s in sources]


# --- CG-1: the fixed order ------------------------------------------------------------------


def test_cg1_sources_in_fixed_order_system_prompt_snippets_skills_forced():
    own_a, own_b = source("own-a", "public"), source("own-b")
    own_k = skill("own-k", "internal")
    config = view(
        system_prompt="SYSTEM-PROMPT-TEXT",
        system_prompt_class="internal",
        snippets=[own_b, own_a],  # configured order, not alphabetical
        skills=[own_k],
    )
    forced_s = [source("forced-z", forced=True), source("forced-y", forced=True)]
    forced_k = [skill("forced-k", forced=True)]
    composed = compose_sources(config, forced_s, forced_k)
    assert names(composed) == [
        (SYSTEM_PROMPT, "cfg"),
        (SNIPPET, "own-b"),
        (SNIPPET, "own-a"),
        (SKILL, "own-k"),
        (SNIPPET, "forced-z"),
        (SNIPPET, "forced-y"),
        (SKILL, "forced-k"),
    ]
    assert composed[0].declared == "internal"
    assert [s.forced for s in composed] == [False] * 4 + [True] * 3


def test_cg1_system_prompt_listed_only_when_its_text_is_non_empty():
    config = view(system_prompt="", system_prompt_class="secret", zone="external_global")
    composed = compose_sources(config)
    assert SYSTEM_PROMPT not in [s.kind for s in composed]
    # Its declared class therefore cannot refuse anything.
    assert decide(config, composed).verdict is Verdict.UNDECLARED


def test_cg1_non_empty_system_prompt_is_a_source_even_when_undeclared():
    composed = compose_sources(view(system_prompt="Be helpful."))
    assert names(composed) == [(SYSTEM_PROMPT, "cfg")]
    assert composed[0].data_class is None


def test_cg1_forced_source_the_configuration_carries_is_listed_once_at_its_own_place():
    own = source("shared", "internal", id=7)
    own_skill = skill("shared-skill", "public", id=8)
    config = view(snippets=[own, source("other")], skills=[own_skill])
    forced_dup = source("shared", "internal", id=7, forced=True)
    forced_skill_dup = skill("shared-skill", "public", id=8, forced=True)
    composed = compose_sources(config, [forced_dup, forced_dup], [forced_skill_dup])
    assert names(composed) == [(SNIPPET, "shared"), (SNIPPET, "other"), (SKILL, "shared-skill")]
    assert not any(s.forced for s in composed)


def test_cg1_snippet_and_skill_with_the_same_id_are_different_sources():
    composed = compose_sources(view(), [source("sn", id=5)], [skill("sk", id=5)])
    assert names(composed) == [(SNIPPET, "sn"), (SKILL, "sk")]


def test_cg1_no_forced_set_is_just_the_configuration():
    config = view(snippets=[source("a")], skills=[skill("b")])
    assert (
        compose_sources(config)
        == compose_sources(config, [], [])
        == (config.snippets + config.skills)
    )


# --- CG-2: the task input is never classified ---------------------------------------------


def test_cg2_task_input_is_not_a_source():
    """There is no way to hand the task input to composition; what is composed comes only
    from the configuration, the forced set, what a fork carried (FORK-1) and the labelled
    replies a send carries (CG-12)."""
    params = list(inspect.signature(compose_sources).parameters)
    assert params == ["config", "forced_snippets", "forced_skills", "carried", "replies"]
    config = view(system_prompt="sp", snippets=[source("a")], skills=[skill("b")])
    forced = [source("f", forced=True)]
    composed = compose_sources(config, forced, None)
    allowed = {s.identity for s in (*config.snippets, *config.skills, *forced)}
    allowed.add((SYSTEM_PROMPT, config.id))
    assert {s.identity for s in composed} == allowed
    assert {s.kind for s in composed} <= {SYSTEM_PROMPT, SNIPPET, SKILL}


@pytest.mark.django_db
def test_cg2_configuration_without_sources_reads_out_empty_not_the_input(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = None
    configuration = make_configuration("bare")
    data = configuration_readout(configuration=configuration)
    assert data["sources"] == []
    assert data["verdict"] == "undeclared"


# --- CG-3: strictest wins --------------------------------------------------------------------


def test_cg3_strictest_declared_source_wins_and_is_the_only_one_named():
    sources = [
        source("low", "public"),
        source("high", "restricted"),
        source("mid", "confidential"),
        skill("other", "internal"),
    ]
    winner = effective_source(sources)
    assert winner is not None and winner.name == "high"
    decision = decide(view(zone="external_eu"), sources)
    assert decision.refused
    assert decision.source.name == "high"
    assert decision.data_class.label == "restricted"


def test_cg3_on_a_tie_the_later_source_is_named():
    first, second = source("first", "confidential"), skill("second", "confidential")
    assert effective_source([first, second]) is second
    assert effective_source([second, first]) is first
    decision = decide(view(zone="external_global"), [first, source("x", "public"), second])
    assert decision.source is second


def test_cg3_undeclared_never_wins():
    declared = source("declared", "public")
    sources = [declared, source("blank", ""), source("bogus", "ultra-secret")]
    assert effective_source(sources) is declared
    assert decide(view(zone="external_global"), sources).verdict is Verdict.PERMITTED


def test_cg3_decision_is_stable_for_the_same_list():
    """The same list always names the same source (before and after a suspend)."""
    sources = [source("a", "internal"), source("b", "internal"), source("c", "public")]
    config = view(zone="external_global")
    assert decide(config, sources) == decide(config, list(sources))
    assert decide(config, sources).source.name == "b"


def test_cg3_cg4_everything_undeclared_is_undeclared_without_a_zone_lookup(monkeypatch):
    def no_lookup(*_a, **_k):
        raise AssertionError("zone looked up for an undeclared context")

    monkeypatch.setattr(core, "reachable_zone", no_lookup)
    config = view(zone=None, fallbacks=[link("fb", None)])
    for sources in ([], [source("a"), skill("b", "nonsense")]):
        decision = decide(config, sources)
        assert decision.verdict is Verdict.UNDECLARED
        assert decision.zone is None
        assert decision.ceiling is None
        assert decision.source is None
        assert not decision.refused


# --- CG-4: deciding is pure; asserting writes one audit row -------------------------------


@pytest.mark.django_db
def test_cg4_decide_is_a_pure_function(django_assert_num_queries):
    config = view(zone="external_global")
    sources = [source("s", "secret")]
    before = GateAudit.objects.count()
    with django_assert_num_queries(0):
        first = decide(config, sources)
        second = decide(config, sources)
    assert first == second and first.refused
    assert GateAudit.objects.count() == before


def all_texts(*sources):
    return [s.text for s in sources]


@pytest.mark.django_db
def test_cg4_context_assert_writes_exactly_one_audit_row_per_call(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = None
    config = view("cfg-audit", zone="external_eu")
    context_assert(save=save_audits, config=config, sources=[source("ok", "public")], run_id=11)
    assert GateAudit.objects.count() == 1
    context_assert(save=save_audits, config=config, sources=[source("blank")])
    assert GateAudit.objects.count() == 2
    with pytest.raises(ContextRefused):
        context_assert(
            save=save_audits, config=config, sources=[source("bad", "secret")], run_id=12
        )
    assert GateAudit.objects.count() == 3
    verdicts = list(GateAudit.objects.order_by("id").values_list("verdict", "run_id"))
    assert verdicts == [("permitted", 11), ("undeclared", None), ("refused", 12)]


@pytest.mark.django_db
def test_cg4_audit_row_has_the_decision_fields_and_no_text(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"
    low = source("low-note", "public", text="LOW-TEXT-7d1e")
    high = source("high-note", "restricted", forced=True, text="HIGH-TEXT-91ab")
    config = view(
        "cfg-audit",
        zone="local",
        fallbacks=[link("fb", "external_eu")],
        system_prompt="SYSTEM-TEXT-55c2",
        system_prompt_class="internal",
    )
    sources = compose_sources(config, [low, high])
    with pytest.raises(ContextRefused):
        context_assert(save=save_audits, config=config, sources=sources, run_id=99)
    row = GateAudit.objects.get()
    assert row.verdict == "refused"
    assert row.enforcement == Enforcement.ENFORCE.recorded == "enforced"
    assert row.configuration == "cfg-audit"
    assert row.run_id == 99
    assert row.zone == "external_eu"
    assert row.ceiling == "confidential"
    assert row.source_kind == "snippet"
    assert row.source_name == "high-note"
    assert row.data_class == "restricted"
    assert row.forced is True
    stored = " ".join(str(getattr(row, f.attname)) for f in GateAudit._meta.concrete_fields)
    for text in ("LOW-TEXT-7d1e", "HIGH-TEXT-91ab", "SYSTEM-TEXT-55c2"):
        assert text not in stored


@pytest.mark.django_db
def test_cg4_permitted_assert_returns_the_decision_and_does_not_raise(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"
    asserted = context_assert(
        save=save_audits, config=view(zone="local"), sources=[source("s", "secret")]
    )
    assert asserted.decision.verdict is Verdict.PERMITTED
    assert asserted.enforcement is Enforcement.ENFORCE
    assert not asserted.observed_refusal
    assert GateAudit.objects.get().enforcement == "enforced"


# --- CG-5: enforcement fails closed ------------------------------------------------------

OBSERVING = ["observe", " OBSERVE ", "Observe\n", "\tobserve"]
ENFORCING = ["observ", "off", "", None, "enforce", "false", "0", "observe mode", "observed"]


@pytest.mark.parametrize("raw", OBSERVING)
def test_cg5_exactly_observe_ignoring_case_and_whitespace_observes(raw, settings):
    assert parse_enforcement(raw) is Enforcement.OBSERVE
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = raw
    assert current_enforcement() is Enforcement.OBSERVE


@pytest.mark.parametrize("raw", ENFORCING)
def test_cg5_anything_else_enforces(raw, settings):
    assert parse_enforcement(raw) is Enforcement.ENFORCE
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = raw
    assert current_enforcement() is Enforcement.ENFORCE


def test_cg5_missing_setting_enforces(settings):
    del settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT
    assert current_enforcement() is Enforcement.ENFORCE


@pytest.mark.parametrize("raw", [False, 0])
def test_cg5_non_string_setting_enforces(raw):
    assert parse_enforcement(raw) is Enforcement.ENFORCE


@pytest.mark.django_db
@pytest.mark.parametrize(("raw", "shown"), [(" Observe ", "observe"), ("observ", "enforce")])
def test_cg5_readout_shows_the_effective_mode(raw, shown, settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = raw
    assert configuration_readout(configuration=make_configuration("c"))["enforcement"] == shown


@pytest.mark.django_db
@pytest.mark.parametrize("raw", ["observ", "off", "", None])
def test_cg5_a_typo_in_the_setting_still_refuses(raw, settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = raw
    with pytest.raises(ContextRefused):
        context_assert(
            save=save_audits, config=view(zone="external_global"), sources=[source("s", "secret")]
        )
    assert GateAudit.objects.get().enforcement == "enforced"


# --- CG-6: observe mode ------------------------------------------------------------------


@pytest.mark.django_db
def test_cg6_observe_lets_the_refusal_through_and_marks_the_audit_row(settings, caplog):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "observe"
    with caplog.at_level(logging.WARNING, logger="agentruns.gate.audit"):
        asserted = context_assert(
            save=save_audits,
            config=view("cfg-obs", zone="external_global"),
            sources=[source("hot", "secret")],
        )
    assert asserted.decision.refused
    assert asserted.observed_refusal
    row = GateAudit.objects.get()
    assert (row.verdict, row.enforcement) == ("refused", "observed")
    assert any("cfg-obs" in record.getMessage() for record in caplog.records)


@pytest.mark.django_db
def test_cg6_readout_says_refused_observed(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "observe"
    hot = make_snippet("hot", "secret")
    configuration = make_configuration(
        "c", provider=make_provider("glob", zone="external_global"), snippets=[hot]
    )
    assert configuration_readout(configuration=configuration)["verdict"] == "refused (observed)"
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"
    assert configuration_readout(configuration=configuration)["verdict"] == "refused"


# --- CG-7: the refusal message ----------------------------------------------------------


def refused_decision():
    """external_eu reachable (via the fallback); a secret snippet among milder sources."""
    config = view(
        "cfg-kestrel",
        zone="local",
        fallbacks=[link("fb-osprey", "external_eu")],
        system_prompt="SYSTEM-TEXT-a9f3",
        system_prompt_class="internal",
        snippets=[
            source("lowly-pigeon", "public", text="PIGEON-TEXT-1c2d"),
            source("secret-falcon", "secret", text="FALCON-TEXT-77e0"),
        ],
        skills=[skill("mid-sparrow", "confidential", text="SPARROW-TEXT-3b4c")],
    )
    sources = compose_sources(
        config,
        [source("forced-wren", "internal", forced=True, text="WREN-TEXT-0f0f")],
        [skill("forced-owl", "", forced=True, text="OWL-TEXT-4242")],
    )
    return decide(config, sources), sources


def test_cg7_refusal_message_names_everything_needed():
    decision, _ = refused_decision()
    message = refusal_message(decision)
    assert "cfg-kestrel" in message  # configuration
    assert "external_eu" in message  # reachable zone
    assert "confidential" in message  # that zone's ceiling
    assert "snippet" in message and "secret-falcon" in message  # kind and name
    assert "secret" in message.replace("secret-falcon", "")  # declared class
    lowered = message.lower()
    assert "raise the provider" in lowered and "zone" in lowered  # remedy 1
    assert "remove" in lowered  # remedy 2
    assert "correct" in lowered and "data class" in lowered  # remedy 3


def test_cg7_refusal_message_never_contains_any_source_text():
    decision, sources = refused_decision()
    message = refusal_message(decision)
    for text in all_texts(*sources):
        assert text and text not in message
    assert "TEXT" not in message


def test_cg7_refusal_message_never_names_a_less_strict_co_listed_source():
    decision, _ = refused_decision()
    message = refusal_message(decision)
    for other in ("lowly-pigeon", "mid-sparrow", "forced-wren", "forced-owl", "system prompt"):
        assert other not in message


def test_cg7_refusal_fields_are_structured():
    decision, _ = refused_decision()
    assert refusal_fields(decision) == {
        "configuration": "cfg-kestrel",
        "zone": "external_eu",
        "ceiling": "confidential",
        "source_kind": "snippet",
        "source_name": "secret-falcon",
        "data_class": "secret",
        "forced": False,
    }


@pytest.mark.django_db
def test_cg7_context_refused_error_carries_the_structured_fields(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"
    config = view("cfg-x", zone="external_global")
    forced = source("forced-hot", "restricted", forced=True, text="HOT-TEXT-beef")
    with pytest.raises(ContextRefused) as caught:
        context_assert(save=save_audits, config=config, sources=compose_sources(config, [forced]))
    error = caught.value
    assert error.code == "context_refused"
    assert error.fields == {
        "configuration": "cfg-x",
        "zone": "external_global",
        "ceiling": "internal",
        "source_kind": "snippet",
        "source_name": "forced-hot",
        "data_class": "restricted",
        "forced": True,
    }
    body = error.as_dict()
    assert body["code"] == "context_refused"
    assert "forced-hot" in body["detail"]
    assert "HOT-TEXT-beef" not in str(body)


def test_cg7_system_prompt_refusal_names_the_system_prompt_without_its_text():
    config = view(
        "cfg-sp", zone="external_global", system_prompt="SP-TEXT-d00d", system_prompt_class="secret"
    )
    decision = decide(config, compose_sources(config))
    message = refusal_message(decision)
    assert decision.source.kind == SYSTEM_PROMPT
    assert "system prompt" in message
    assert "SP-TEXT-d00d" not in message
