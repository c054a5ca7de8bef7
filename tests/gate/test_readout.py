"""The readout (CG-10): the same folded list the gate sees, for admin, API and selectors."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentruns.gate.core import compose_sources, decide
from agentruns.gate.lookups import config_view, forced_for_composition
from agentruns.selectors import configuration_readout
from tests.support.catalog import make_configuration, make_provider, make_skill, make_snippet

pytestmark = pytest.mark.django_db

READOUT_KEYS = {
    "configuration",
    "sources",
    "effective_class",
    "effective_source",
    "zone",
    "ceiling",
    "enforcement",
    "verdict",
}


@pytest.fixture(autouse=True)
def enforce(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"


@pytest.fixture
def catalog():
    """Config `desk` on external_eu via a fallback; a mix of declared and undeclared."""
    fallback = make_configuration("desk-fb", provider=make_provider("eu", zone="external_eu"))
    own_plain = make_snippet("own-plain", "")
    own_conf = make_snippet("own-conf", "confidential")
    own_skill = make_skill("own-skill", "internal")
    configuration = make_configuration(
        "desk",
        provider=make_provider("home", zone="local"),
        snippets=[own_plain, own_conf],
        skills=[own_skill],
        fallbacks=[fallback],
        system_prompt="Be brief.",
        system_prompt_data_class="public",
    )
    forced = make_snippet("forced-secret", "secret")
    forced_skill = make_skill("forced-skill", "")
    sleepy = make_snippet("forced-sleepy", "secret", active=False)
    return {
        "configuration": configuration,
        "forced": forced,
        "forced_skill": forced_skill,
        "sleepy": sleepy,
    }


def test_cg10_readout_lists_every_source_with_kind_and_class(catalog):
    data = configuration_readout(configuration=catalog["configuration"])
    assert set(data) >= READOUT_KEYS
    rows = [(s["kind"], s["name"], s["data_class"], s["forced"]) for s in data["sources"]]
    assert rows == [
        ("system_prompt", "desk", "public", False),
        ("snippet", "own-plain", "undeclared", False),
        ("snippet", "own-conf", "confidential", False),
        ("skill", "own-skill", "internal", False),
    ]
    assert data["configuration"] == "desk"
    assert data["effective_class"] == "confidential"
    assert data["effective_source"] == {"kind": "snippet", "name": "own-conf", "forced": False}
    assert (data["zone"], data["ceiling"]) == ("external_eu", "confidential")
    assert data["chain"] == [
        {"configuration": "desk", "zone": "local"},
        {"configuration": "desk-fb", "zone": "external_eu"},
    ]
    assert data["enforcement"] == "enforce"
    assert data["verdict"] == "permitted"
    assert data["message"] == ""
    assert data["dropped"] == []


def test_cg10_readout_folds_the_very_list_the_gate_folds(catalog):
    configuration = catalog["configuration"]
    ids = [catalog["forced"].pk, catalog["sleepy"].pk]
    skill_ids = [catalog["forced_skill"].pk]
    data = configuration_readout(
        configuration=configuration, forced_snippet_ids=ids, forced_skill_ids=skill_ids
    )
    view = config_view(configuration)
    snippets, skills, _ = forced_for_composition(ids, skill_ids)
    gate_sources = compose_sources(view, snippets, skills)
    decision = decide(view, gate_sources)
    assert [(s["kind"], s["id"]) for s in data["sources"]] == [s.identity for s in gate_sources]
    assert data["verdict"] == decision.verdict.value == "refused"
    assert data["effective_source"] == {"kind": "snippet", "name": "forced-secret", "forced": True}
    assert data["effective_class"] == "secret"
    assert "forced-secret" in data["message"]
    assert data["sources"][-2:] == [
        {
            "kind": "snippet",
            "id": catalog["forced"].pk,
            "name": "forced-secret",
            "title": "Snippet forced-secret",
            "data_class": "secret",
            "forced": True,
        },
        {
            "kind": "skill",
            "id": catalog["forced_skill"].pk,
            "name": "forced-skill",
            "title": "Skill forced-skill",
            "data_class": "undeclared",
            "forced": True,
        },
    ]
    assert data["dropped"] == [
        {
            "kind": "snippet",
            "id": catalog["sleepy"].pk,
            "name": "forced-sleepy",
            "reason": "deactivated",
        }
    ]


def test_cg10_empty_source_list_is_shown_empty_not_omitted():
    configuration = make_configuration("empty", provider=make_provider("p", zone="external_eu"))
    data = configuration_readout(configuration=configuration)
    assert data["sources"] == []
    assert data["effective_class"] == "undeclared"
    assert data["effective_source"] is None
    assert data["verdict"] == "undeclared"
    # Zone and ceiling are still shown so the operator knows where it would go.
    assert (data["zone"], data["ceiling"]) == ("external_eu", "confidential")


def test_cg10_readout_never_contains_source_text():
    hot = make_snippet("hot", "secret", text="HOT-TEXT-c0ffee")
    configuration = make_configuration(
        "c",
        provider=make_provider("g", zone="external_global"),
        snippets=[hot],
        system_prompt="SYSTEM-TEXT-f00d",
        system_prompt_data_class="internal",
    )
    data = configuration_readout(configuration=configuration)
    assert data["verdict"] == "refused"
    assert "HOT-TEXT-c0ffee" not in str(data)
    assert "SYSTEM-TEXT-f00d" not in str(data)


# --- API ----------------------------------------------------------------------------------


def test_cg10_api_get_readout_with_a_forced_set_and_dropped_sources(catalog, api):
    gone = make_snippet("gone", "secret")
    gone_id = gone.pk
    gone.delete()
    forced = f"{catalog['forced'].pk},{catalog['sleepy'].pk},{gone_id}"
    response = api.get(
        f"/api/configurations/desk/readout/?forced_snippets={forced}"
        f"&forced_skills={catalog['forced_skill'].pk}"
    )
    assert response.status_code == 200, response.json()
    data = response.json()
    assert set(data) >= READOUT_KEYS
    assert [s["name"] for s in data["sources"]] == [
        "desk",
        "own-plain",
        "own-conf",
        "own-skill",
        "forced-secret",
        "forced-skill",
    ]
    assert data["verdict"] == "refused"
    assert data["effective_source"]["name"] == "forced-secret"
    assert [(d["name"], d["reason"]) for d in data["dropped"]] == [
        ("forced-sleepy", "deactivated"),
        ("", "gone"),
    ]
    assert data["dropped"][1]["id"] == gone_id


def test_cg10_api_post_readout_matches_get(catalog, api):
    ids = [catalog["forced"].pk, catalog["sleepy"].pk]
    skill_ids = [catalog["forced_skill"].pk]
    posted = api.post(
        "/api/configurations/desk/readout/",
        {"forced_snippets": ids, "forced_skills": skill_ids},
        format="json",
    )
    assert posted.status_code == 200, posted.json()
    got = api.get(
        "/api/configurations/desk/readout/"
        f"?forced_snippets={ids[0]},{ids[1]}&forced_skills={skill_ids[0]}"
    )
    assert posted.json() == got.json()
    assert posted.json()["dropped"][0]["reason"] == "deactivated"


def test_cg10_api_empty_source_list_is_an_empty_list(api):
    make_configuration("empty", provider=make_provider("p", zone="local"))
    for response in (
        api.get("/api/configurations/empty/readout/"),
        api.post("/api/configurations/empty/readout/", {}, format="json"),
    ):
        assert response.status_code == 200
        data = response.json()
        assert "sources" in data and data["sources"] == []
        assert data["dropped"] == []
        assert data["effective_source"] is None
        assert data["verdict"] == "undeclared"


def test_cg10_api_readout_shows_observed_refusal(catalog, api, settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "observe"
    data = api.get(
        f"/api/configurations/desk/readout/?forced_snippets={catalog['forced'].pk}"
    ).json()
    assert data["enforcement"] == "observe"
    assert data["verdict"] == "refused (observed)"


def test_cg10_api_readout_bad_input_is_a_clear_400(catalog, api):
    response = api.get("/api/configurations/desk/readout/?forced_snippets=1,abc")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    response = api.post(
        "/api/configurations/desk/readout/", {"forced_snippets": "nope"}, format="json"
    )
    assert response.status_code == 400
    assert "forced_snippets" in response.json()["fields"]


def test_cg10_api_readout_of_unknown_configuration_is_404(api):
    response = api.get("/api/configurations/nope/readout/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_cg10_api_readout_is_staff_only(catalog, member):
    client = APIClient()
    client.force_authenticate(member)
    response = client.get("/api/configurations/desk/readout/")
    assert response.status_code == 403
    assert "sources" not in response.json()


# --- admin --------------------------------------------------------------------------------


@pytest.fixture
def admin_client_logged_in(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def test_cg10_admin_change_page_renders_the_readout_panel(catalog, admin_client_logged_in):
    configuration = catalog["configuration"]
    response = admin_client_logged_in.get(
        f"/admin/agentruns/configuration/{configuration.pk}/change/"
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="readout"' in html
    for name in ("own-plain", "own-conf", "own-skill"):
        assert name in html
    assert "undeclared" in html
    assert "external_eu" in html  # the reachable zone
    assert "confidential" in html  # the ceiling
    assert "permitted" in html  # the verdict
    assert "Be brief." not in html.split('class="readout"', 1)[1].split("</div>", 1)[0]


def test_cg10_admin_readout_panel_shows_a_refusal_and_empty_list(admin_client_logged_in):
    hot = make_snippet("hot-one", "secret")
    refused = make_configuration(
        "refused", provider=make_provider("g", zone="external_global"), snippets=[hot]
    )
    html = admin_client_logged_in.get(
        f"/admin/agentruns/configuration/{refused.pk}/change/"
    ).content.decode()
    panel = html.split('class="readout"', 1)[1].split("</div>", 1)[0]
    assert "refused" in panel and "hot-one" in panel and "external_global" in panel

    empty = make_configuration("empty", provider=make_provider("l", zone="local"))
    html = admin_client_logged_in.get(
        f"/admin/agentruns/configuration/{empty.pk}/change/"
    ).content.decode()
    panel = html.split('class="readout"', 1)[1].split("</div>", 1)[0]
    assert "No sources" in panel
    assert "undeclared" in panel
