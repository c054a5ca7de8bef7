"""Forced sources (FS-1, FS-2, FS-4) and the resume-time existence lookup (RG-2)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentruns.errors import ContextRefused
from agentruns.gate.audit import context_assert
from agentruns.gate.core import SKILL, SNIPPET, Verdict, compose_sources, decide
from agentruns.gate.lookups import (
    DEACTIVATED,
    GONE,
    config_view,
    forced_for_composition,
    forced_for_resume,
)
from agentruns.models import GateAudit
from agentruns.selectors import configuration_readout
from tests.support.catalog import (
    make_configuration,
    make_provider,
    make_skill,
    make_snippet,
    save_audits,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def enforce(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"


@pytest.fixture
def eu_config():
    """Reachable zone external_eu (ceiling confidential), one internal snippet of its own."""
    return make_configuration(
        "eu",
        provider=make_provider("eu-provider", zone="external_eu"),
        snippets=[make_snippet("own-note", "internal")],
        system_prompt="You help.",
        system_prompt_data_class="public",
    )


def gate_composed(configuration, snippet_ids=None, skill_ids=None):
    view = config_view(configuration)
    snippets, skills, dropped = forced_for_composition(snippet_ids, skill_ids)
    return view, compose_sources(view, snippets, skills), dropped


# --- FS-1 ---------------------------------------------------------------------------------


def test_fs1_forced_snippet_at_or_below_the_ceiling_is_permitted(eu_config):
    mild = make_snippet("mild", "confidential")
    view, sources, _ = gate_composed(eu_config, [mild.pk])
    asserted = context_assert(save=save_audits, config=view, sources=sources)
    assert asserted.decision.verdict is Verdict.PERMITTED
    assert asserted.decision.source.name == "mild"


def test_fs1_forced_snippet_above_the_ceiling_is_refused_and_named(eu_config):
    hot = make_snippet("hot-dossier", "restricted")
    view, sources, _ = gate_composed(eu_config, [hot.pk])
    with pytest.raises(ContextRefused) as caught:
        context_assert(save=save_audits, config=view, sources=sources)
    fields = caught.value.fields
    assert fields["source_kind"] == SNIPPET
    assert fields["source_name"] == "hot-dossier"
    assert fields["forced"] is True
    assert fields["ceiling"] == "confidential"
    assert "hot-dossier" in caught.value.detail
    row = GateAudit.objects.get()
    assert (row.verdict, row.source_name, row.forced) == ("refused", "hot-dossier", True)


def test_fs1_forced_skill_above_the_ceiling_is_refused_and_named(eu_config):
    permitted = make_skill("ok-skill", "internal")
    view, sources, _ = gate_composed(eu_config, None, [permitted.pk])
    assert decide(view, sources).verdict is Verdict.PERMITTED

    hot = make_skill("hot-skill", "secret")
    view, sources, _ = gate_composed(eu_config, None, [permitted.pk, hot.pk])
    with pytest.raises(ContextRefused) as caught:
        context_assert(save=save_audits, config=view, sources=sources)
    fields = caught.value.fields
    assert (fields["source_kind"], fields["source_name"], fields["forced"]) == (
        SKILL,
        "hot-skill",
        True,
    )
    assert fields["data_class"] == "secret"


def test_fs1_being_a_superuser_waives_nothing(eu_config, django_user_model):
    admin = django_user_model.objects.create_superuser("root", password="pw")
    client = APIClient()
    client.force_authenticate(admin)
    hot = make_snippet("hot", "restricted")
    hot_skill = make_skill("hot-skill", "secret")

    got = client.get(f"/api/configurations/eu/readout/?forced_snippets={hot.pk}")
    assert got.status_code == 200, got.json()
    assert got.json()["verdict"] == "refused"
    assert got.json()["effective_source"] == {"kind": "snippet", "name": "hot", "forced": True}

    posted = client.post(
        "/api/configurations/eu/readout/",
        {"forced_snippets": [hot.pk], "forced_skills": [hot_skill.pk]},
        format="json",
    )
    assert posted.status_code == 200, posted.json()
    body = posted.json()
    assert body["verdict"] == "refused"
    assert body["effective_source"] == {"kind": "skill", "name": "hot-skill", "forced": True}
    assert "hot-skill" in body["message"]


# --- FS-2 ---------------------------------------------------------------------------------


def test_fs2_no_forced_set_equals_an_empty_forced_set(eu_config, api):
    view = config_view(eu_config)
    assert compose_sources(view) == compose_sources(view, [], [])
    assert decide(view, compose_sources(view)) == decide(view, compose_sources(view, [], []))

    bare = configuration_readout(configuration=eu_config)
    empty = configuration_readout(
        configuration=eu_config, forced_snippet_ids=[], forced_skill_ids=[]
    )
    assert bare == empty
    assert bare["dropped"] == []
    assert [s["name"] for s in bare["sources"]] == ["eu", "own-note"]

    get = api.get("/api/configurations/eu/readout/").json()
    post_empty = api.post(
        "/api/configurations/eu/readout/",
        {"forced_snippets": [], "forced_skills": []},
        format="json",
    ).json()
    post_nothing = api.post("/api/configurations/eu/readout/", {}, format="json").json()
    assert get == post_empty == post_nothing == bare


# --- FS-4: composition uses only active sources ---------------------------------------------


def test_fs4_inactive_and_deleted_forced_sources_are_dropped_with_a_reason():
    first = make_snippet("first", "public")
    sleepy = make_snippet("sleepy", "secret", active=False)
    doomed = make_snippet("doomed", "secret")
    last = make_snippet("last", "internal")
    skill_ok = make_skill("skill-ok", "public")
    skill_off = make_skill("skill-off", "secret", active=False)
    skill_doomed = make_skill("skill-doomed", "secret")
    doomed_id, skill_doomed_id = doomed.pk, skill_doomed.pk
    doomed.delete()
    skill_doomed.delete()

    snippets, skills, dropped = forced_for_composition(
        [last.pk, sleepy.pk, doomed_id, first.pk], [skill_doomed_id, skill_off.pk, skill_ok.pk]
    )
    assert [s.name for s in snippets] == ["last", "first"]  # order of the rest kept
    assert [s.name for s in skills] == ["skill-ok"]
    assert all(s.forced for s in (*snippets, *skills))
    assert [d.as_dict() for d in dropped] == [
        {"kind": SNIPPET, "id": sleepy.pk, "name": "sleepy", "reason": DEACTIVATED},
        {"kind": SNIPPET, "id": doomed_id, "name": "", "reason": GONE},
        {"kind": SKILL, "id": skill_doomed_id, "name": "", "reason": GONE},
        {"kind": SKILL, "id": skill_off.pk, "name": "skill-off", "reason": DEACTIVATED},
    ]
    assert (DEACTIVATED, GONE) == ("deactivated", "gone")


def test_fs4_nothing_dropped_means_an_empty_dropped_list():
    a = make_snippet("a")
    _, _, dropped = forced_for_composition([a.pk], [])
    assert dropped == []
    assert forced_for_composition(None, None) == ([], [], [])


def test_fs4_dropped_forced_sources_do_not_reach_the_gate(eu_config):
    sleepy = make_snippet("sleepy", "secret", active=False)
    view, sources, dropped = gate_composed(eu_config, [sleepy.pk])
    assert "sleepy" not in [s.name for s in sources]
    assert [d.reason for d in dropped] == [DEACTIVATED]
    assert decide(view, sources).verdict is Verdict.PERMITTED


def test_fs4_the_configurations_own_inactive_source_is_not_composed():
    sleepy = make_snippet("own-sleepy", "secret", active=False)
    sleepy_skill = make_skill("own-sleepy-skill", "secret", active=False)
    awake = make_snippet("own-awake", "public")
    configuration = make_configuration(
        "c",
        provider=make_provider("glob", zone="external_global"),
        snippets=[sleepy, awake],
        skills=[sleepy_skill],
    )
    view = config_view(configuration)
    assert [s.name for s in compose_sources(view)] == ["own-awake"]
    assert decide(view, compose_sources(view)).verdict is Verdict.PERMITTED
    # Forcing it back in does not resurrect it either.
    data = configuration_readout(configuration=configuration, forced_snippet_ids=[sleepy.pk])
    assert [s["name"] for s in data["sources"]] == ["own-awake"]
    assert data["dropped"] == [
        {"kind": SNIPPET, "id": sleepy.pk, "name": "own-sleepy", "reason": DEACTIVATED}
    ]


# --- RG-2: resume uses an existence lookup ---------------------------------------------------


def test_rg2_resume_keeps_an_inactive_forced_source_and_it_still_counts(eu_config):
    sleepy = make_snippet("sleepy", "restricted", active=False)
    sleepy_skill = make_skill("sleepy-skill", "internal", active=False)
    snippets, skills = forced_for_resume([sleepy.pk], [sleepy_skill.pk])
    assert [(s.name, s.forced) for s in snippets] == [("sleepy", True)]
    assert [(s.name, s.forced) for s in skills] == [("sleepy-skill", True)]
    view = config_view(eu_config)
    with pytest.raises(ContextRefused) as caught:
        context_assert(
            save=save_audits, config=view, sources=compose_sources(view, snippets, skills)
        )
    assert caught.value.fields["source_name"] == "sleepy"
    assert caught.value.fields["forced"] is True


def test_rg2_resume_drops_a_deleted_forced_source_silently(eu_config):
    keep = make_snippet("keep", "internal")
    gone = make_snippet("gone", "secret")
    gone_id = gone.pk
    gone.delete()
    result = forced_for_resume([gone_id, keep.pk], [])
    assert len(result) == 2  # no "dropped" report on resume
    snippets, skills = result
    assert [s.name for s in snippets] == ["keep"]
    assert skills == []
    view = config_view(eu_config)
    decision = context_assert(
        save=save_audits, config=view, sources=compose_sources(view, snippets, skills)
    )
    assert decision.decision.verdict is Verdict.PERMITTED


def test_rg2_every_forced_source_gone_equals_the_configuration_only_answer(eu_config):
    a, b = make_snippet("a", "secret"), make_skill("b", "secret")
    ids = (a.pk, b.pk)
    a.delete()
    b.delete()
    snippets, skills = forced_for_resume([ids[0]], [ids[1]])
    assert (snippets, skills) == ([], [])
    view = config_view(eu_config)
    assert compose_sources(view, snippets, skills) == compose_sources(view)
    assert decide(view, compose_sources(view, snippets, skills)) == decide(
        view, compose_sources(view)
    )


def test_rg2_resume_sees_the_live_class_of_a_forced_source(eu_config):
    """Identity, not snapshot: a class raised while the run waited takes effect."""
    note = make_snippet("note", "internal")
    view = config_view(eu_config)
    snippets, skills = forced_for_resume([note.pk], [])
    assert decide(view, compose_sources(view, snippets, skills)).verdict is Verdict.PERMITTED
    note.data_class = "secret"
    note.save()
    snippets, skills = forced_for_resume([note.pk], [])
    decision = decide(view, compose_sources(view, snippets, skills))
    assert decision.refused and decision.source.name == "note"
