"""Catalog CRUD over the API (§11, SEC-1, SEC-3) and fallback-cycle validation (API, admin)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agentruns.models import (
    Configuration,
    ConfigurationFallback,
    ConfigurationSnippet,
    Provider,
    Skill,
    Snippet,
)
from tests.support.catalog import make_configuration, make_provider, make_skill, make_snippet

pytestmark = pytest.mark.django_db

PROVIDER_FIELDS = {
    "slug",
    "name",
    "kind",
    "base_url",
    "api_key_env",
    "trust_zone",
    "timeout_seconds",
    "active",
}
CONFIGURATION_FIELDS = {
    "slug",
    "name",
    "provider",
    "model",
    "system_prompt",
    "system_prompt_data_class",
    "snippets",
    "skills",
    "fallbacks",
    "allowed_tools",
    "max_tool_calls",
    "approval_timeout_seconds",
    "context_budget_tokens",
    "require_second_approver",
    "modes",
    "active",
}
SNIPPET_FIELDS = {"id", "slug", "name", "text", "data_class", "active"}
SKILL_FIELDS = {"id", "slug", "name", "instructions", "data_class", "active"}


def results(response):
    body = response.json()
    return body["results"] if isinstance(body, dict) and "results" in body else body


def assert_error(response, status, code=None):
    assert response.status_code == status, response.content
    body = response.json()
    assert {"code", "detail"} <= set(body), body
    assert isinstance(body["detail"], str) and body["detail"]
    if code:
        assert body["code"] == code, body
    return body


# --- providers ---------------------------------------------------------------------------


def test_provider_crud_by_slug(api):
    body = {
        "slug": "openish",
        "name": "Open-ish",
        "kind": "openai",
        "base_url": "https://llm.example.com/v1",
        "api_key_env": "OPENISH_API_KEY",
        "trust_zone": "external_eu",
        "timeout_seconds": 12.5,
        "active": True,
    }
    created = api.post("/api/providers/", body, format="json")
    assert created.status_code == 201, created.json()
    assert set(created.json()) >= PROVIDER_FIELDS
    assert {k: created.json()[k] for k in body} == body

    assert api.get("/api/providers/openish/").json()["trust_zone"] == "external_eu"
    assert [p["slug"] for p in results(api.get("/api/providers/"))] == ["openish"]

    patched = api.patch("/api/providers/openish/", {"trust_zone": "local"}, format="json")
    assert patched.status_code == 200
    assert patched.json()["trust_zone"] == "local"
    assert patched.json()["name"] == "Open-ish"
    assert Provider.objects.get(slug="openish").trust_zone == "local"

    assert api.delete("/api/providers/openish/").status_code == 204
    assert not Provider.objects.filter(slug="openish").exists()
    assert_error(api.get("/api/providers/openish/"), 404, "not_found")


def test_tz3_provider_created_over_api_defaults_to_external_global(api):
    created = api.post("/api/providers/", {"slug": "p", "name": "P"}, format="json")
    assert created.status_code == 201
    assert created.json()["trust_zone"] == "external_global"


def test_provider_bad_choices_are_field_errors(api):
    response = api.post(
        "/api/providers/",
        {"slug": "p", "name": "P", "kind": "gpt", "trust_zone": "moon", "timeout_seconds": "x"},
        format="json",
    )
    body = assert_error(response, 400, "invalid")
    assert {"kind", "trust_zone", "timeout_seconds"} <= set(body["fields"])
    assert not Provider.objects.exists()


# --- SEC-1: keys are named, never stored or returned --------------------------------------


@pytest.mark.parametrize(
    "key", ["sk-abc123 xyz", "sk-proj-AbC123dEf456GhI789", "sk-ant-api03-XyZ_987-abc"]
)
def test_sec1_api_key_env_refuses_a_value_that_looks_like_a_key(api, key):
    response = api.post(
        "/api/providers/", {"slug": "p", "name": "P", "api_key_env": key}, format="json"
    )
    body = assert_error(response, 400, "invalid")
    assert "api_key_env" in body["fields"]
    assert key.strip() not in response.content.decode()  # not echoed back either
    assert not Provider.objects.exists()


def test_sec1_patching_a_key_into_api_key_env_is_refused_and_not_stored(api):
    make_provider("p", api_key_env="GOOD_NAME")
    response = api.patch("/api/providers/p/", {"api_key_env": "sk-live-12345 abc"}, format="json")
    assert_error(response, 400, "invalid")
    assert Provider.objects.get(slug="p").api_key_env == "GOOD_NAME"


def test_sec1_api_never_returns_key_material(api, monkeypatch, client, django_user_model):
    secret = "sk-test-VERY-SECRET-0123456789"
    monkeypatch.setenv("UNIT_TEST_PROVIDER_KEY", secret)
    provider = make_provider("p", kind="openai", api_key_env="UNIT_TEST_PROVIDER_KEY")
    configuration = make_configuration("c", provider=provider, snippets=[make_snippet("s")])
    pages = [
        api.get("/api/providers/"),
        api.get("/api/providers/p/"),
        api.get("/api/configurations/"),
        api.get("/api/configurations/c/"),
        api.get("/api/configurations/c/readout/"),
        api.patch("/api/providers/p/", {"name": "Renamed"}, format="json"),
    ]
    for response in pages:
        assert response.status_code == 200
        assert secret not in response.content.decode()
    assert api.get("/api/providers/p/").json()["api_key_env"] == "UNIT_TEST_PROVIDER_KEY"
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    for url in (
        f"/admin/agentruns/provider/{provider.pk}/change/",
        f"/admin/agentruns/configuration/{configuration.pk}/change/",
    ):
        page = client.get(url)
        assert page.status_code == 200
        assert secret not in page.content.decode()


# --- configurations ------------------------------------------------------------------------


@pytest.fixture
def sources():
    make_provider("prov", zone="local")
    return {
        "snippets": [make_snippet(slug) for slug in ("s-one", "s-two", "s-three")],
        "skills": [make_skill(slug) for slug in ("k-one", "k-two")],
        "fallbacks": [make_configuration(slug, provider=None) for slug in ("fb-zulu", "fb-alpha")],
    }


def test_configuration_crud_with_ordered_slugs_round_trip(api, sources):
    body = {
        "slug": "desk",
        "name": "Desk",
        "provider": "prov",
        "model": "m-1",
        "system_prompt": "Be brief.",
        "system_prompt_data_class": "internal",
        "snippets": ["s-three", "s-one", "s-two"],
        "skills": ["k-two", "k-one"],
        "fallbacks": ["fb-zulu", "fb-alpha"],
        "allowed_tools": ["clock.now", "notes"],
        "max_tool_calls": 4,
        "approval_timeout_seconds": 600,
        "context_budget_tokens": 8000,
        "require_second_approver": True,
        "modes": {"agent": {"tools": ["clock.now"], "deferred": ["http.get"]}},
        "active": True,
    }
    created = api.post("/api/configurations/", body, format="json")
    assert created.status_code == 201, created.json()
    assert set(created.json()) >= CONFIGURATION_FIELDS
    fetched = api.get("/api/configurations/desk/").json()
    assert {k: fetched[k] for k in body} == body
    assert [c["slug"] for c in results(api.get("/api/configurations/"))] == [
        "desk",
        "fb-alpha",
        "fb-zulu",
    ]
    assert api.delete("/api/configurations/desk/").status_code == 204
    assert not Configuration.objects.filter(slug="desk").exists()
    # Its fallbacks are other configurations; deleting desk leaves them.
    assert Configuration.objects.filter(slug__in=["fb-zulu", "fb-alpha"]).count() == 2


def test_configuration_patch_replaces_an_ordered_list_only_when_given(api, sources):
    api.post(
        "/api/configurations/",
        {
            "slug": "desk",
            "name": "Desk",
            "snippets": ["s-one", "s-two"],
            "skills": ["k-one"],
            "fallbacks": ["fb-zulu"],
        },
        format="json",
    )
    renamed = api.patch("/api/configurations/desk/", {"name": "Front desk"}, format="json")
    assert renamed.status_code == 200
    data = renamed.json()
    assert (data["name"], data["snippets"], data["skills"], data["fallbacks"]) == (
        "Front desk",
        ["s-one", "s-two"],
        ["k-one"],
        ["fb-zulu"],
    )
    reordered = api.patch(
        "/api/configurations/desk/", {"snippets": ["s-three", "s-two", "s-one"]}, format="json"
    ).json()
    assert reordered["snippets"] == ["s-three", "s-two", "s-one"]
    assert (reordered["skills"], reordered["fallbacks"]) == (["k-one"], ["fb-zulu"])
    emptied = api.patch("/api/configurations/desk/", {"skills": []}, format="json").json()
    assert emptied["skills"] == []
    assert emptied["snippets"] == ["s-three", "s-two", "s-one"]
    fetched = api.get("/api/configurations/desk/").json()
    assert fetched["fallbacks"] == ["fb-zulu"]
    assert fetched["skills"] == []


def test_configuration_modes_keep_their_order_so_the_first_is_the_default(api):
    modes = {
        "research": {"tools": ["clock.now"], "deferred": ["http.get"]},
        "chat": {"tools": [], "deferred": []},
    }
    created = api.post(
        "/api/configurations/", {"slug": "m", "name": "M", "modes": modes}, format="json"
    )
    assert created.status_code == 201, created.json()
    assert list(api.get("/api/configurations/m/").json()["modes"]) == ["research", "chat"]


def test_configuration_unknown_snippet_slug_is_a_400_naming_the_field(api, sources):
    response = api.post(
        "/api/configurations/",
        {"slug": "desk", "name": "Desk", "snippets": ["s-one", "no-such-snippet"]},
        format="json",
    )
    body = assert_error(response, 400, "invalid")
    assert "snippets" in body["fields"]
    assert "no-such-snippet" in str(body["fields"]["snippets"])
    assert not Configuration.objects.filter(slug="desk").exists()
    for field in ("skills", "fallbacks", "provider"):
        value = "nope" if field == "provider" else ["nope"]
        response = api.post(
            "/api/configurations/", {"slug": "desk", "name": "Desk", field: value}, format="json"
        )
        assert field in assert_error(response, 400, "invalid")["fields"]


def test_configuration_wrong_types_are_field_errors(api):
    response = api.post(
        "/api/configurations/",
        {
            "slug": "desk",
            "name": "Desk",
            "max_tool_calls": "lots",
            "require_second_approver": "perhaps",
            "allowed_tools": "clock.now",
            "snippets": "s-one",
            "modes": {"agent": {"tools": "clock.now"}},
            "system_prompt_data_class": "ultra",
        },
        format="json",
    )
    body = assert_error(response, 400, "invalid")
    assert {
        "max_tool_calls",
        "require_second_approver",
        "allowed_tools",
        "snippets",
        "modes",
        "system_prompt_data_class",
    } <= set(body["fields"])
    assert not Configuration.objects.exists()


# --- fallback cycles (API) ------------------------------------------------------------------


def state(slug):
    configuration = Configuration.objects.get(slug=slug)
    return {
        "name": configuration.name,
        "model": configuration.model,
        "snippets": list(
            configuration.configurationsnippet_set.values_list("snippet__slug", flat=True)
        ),
        "skills": list(configuration.configurationskill_set.values_list("skill__slug", flat=True)),
        "fallbacks": list(configuration.fallback_links.values_list("fallback__slug", flat=True)),
    }


def test_configuration_cannot_be_its_own_fallback_and_nothing_is_half_saved(api):
    one = make_snippet("one")
    make_snippet("two")
    other = make_configuration("other", provider=None)
    make_configuration("desk", snippets=[one], skills=[make_skill("k")], fallbacks=[other])
    before = state("desk")
    response = api.patch(
        "/api/configurations/desk/",
        {
            "name": "Changed",
            "model": "new-model",
            "snippets": ["two", "one"],
            "fallbacks": ["desk"],
        },
        format="json",
    )
    body = assert_error(response, 400, "invalid")
    assert "own fallback" in body["detail"]
    assert "fallbacks" in body["fields"]
    assert state("desk") == before
    assert before["snippets"] == ["one"] and before["fallbacks"] == ["other"]


def test_two_configuration_fallback_cycle_is_refused_and_nothing_is_half_saved(api):
    a = make_configuration("cfg-a", provider=None)
    make_configuration("cfg-b", provider=None, skills=[make_skill("k1")], fallbacks=[a])
    make_skill("k2")
    before_a, before_b = state("cfg-a"), state("cfg-b")
    response = api.patch(
        "/api/configurations/cfg-a/",
        {"name": "Changed", "skills": ["k2"], "fallbacks": ["cfg-b"]},
        format="json",
    )
    body = assert_error(response, 400, "invalid")
    assert "cycle" in body["detail"]
    assert "cfg-a" in body["detail"] and "cfg-b" in body["detail"]
    assert (state("cfg-a"), state("cfg-b")) == (before_a, before_b)
    assert ConfigurationFallback.objects.count() == 1


def test_longer_fallback_cycle_is_refused(api):
    c = make_configuration("c3", provider=None)
    b = make_configuration("c2", provider=None, fallbacks=[c])
    make_configuration("c1", provider=None, fallbacks=[b])
    response = api.patch("/api/configurations/c3/", {"fallbacks": ["c1"]}, format="json")
    assert "cycle" in assert_error(response, 400, "invalid")["detail"]
    assert state("c3")["fallbacks"] == []


def test_fallback_listed_twice_is_refused(api):
    make_configuration("fb", provider=None)
    make_configuration("desk", provider=None)
    response = api.patch("/api/configurations/desk/", {"fallbacks": ["fb", "fb"]}, format="json")
    assert_error(response, 400, "invalid")
    assert state("desk")["fallbacks"] == []


# --- snippets and skills ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "model", "body_field", "fields"),
    [
        ("/api/snippets/", Snippet, "text", SNIPPET_FIELDS),
        ("/api/skills/", Skill, "instructions", SKILL_FIELDS),
    ],
)
def test_snippet_and_skill_crud_by_id(api, url, model, body_field, fields):
    created = api.post(
        url,
        {"slug": "x", "name": "X", body_field: "words", "data_class": "confidential"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    data = created.json()
    assert set(data) >= fields
    assert (data["data_class"], data["active"], data[body_field]) == ("confidential", True, "words")
    pk = data["id"]
    assert api.get(f"{url}{pk}/").json()["slug"] == "x"
    assert [row["id"] for row in results(api.get(url))] == [pk]
    patched = api.patch(f"{url}{pk}/", {"data_class": "", "active": False}, format="json")
    assert patched.status_code == 200
    assert (patched.json()["data_class"], patched.json()["active"]) == ("", False)
    replaced = api.put(
        f"{url}{pk}/", {"slug": "y", "name": "Y", body_field: "other"}, format="json"
    )
    assert replaced.status_code == 200, replaced.json()
    assert model.objects.get(pk=pk).slug == "y"
    bad = api.patch(f"{url}{pk}/", {"data_class": "top-secret"}, format="json")
    assert "data_class" in assert_error(bad, 400, "invalid")["fields"]
    assert api.delete(f"{url}{pk}/").status_code == 204
    assert not model.objects.filter(pk=pk).exists()


def test_deleting_a_snippet_is_a_real_delete_and_removes_it_from_configurations(api):
    keep, doomed = make_snippet("keep"), make_snippet("doomed")
    make_configuration("desk", snippets=[doomed, keep])
    assert api.delete(f"/api/snippets/{doomed.pk}/").status_code == 204
    assert not Snippet.objects.filter(pk=doomed.pk).exists()
    assert not ConfigurationSnippet.objects.filter(snippet_id=doomed.pk).exists()
    assert api.get("/api/configurations/desk/").json()["snippets"] == ["keep"]
    readout = api.get("/api/configurations/desk/readout/").json()
    assert [s["name"] for s in readout["sources"]] == ["keep"]


def test_deleting_a_skill_removes_it_from_configurations(api):
    doomed = make_skill("doomed")
    make_configuration("desk", skills=[doomed])
    assert api.delete(f"/api/skills/{doomed.pk}/").status_code == 204
    assert api.get("/api/configurations/desk/").json()["skills"] == []


# --- errors: auth, malformed, not found -------------------------------------------------

ENDPOINTS = ["/api/providers/", "/api/configurations/", "/api/snippets/", "/api/skills/"]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_non_staff_gets_403_with_a_code(url, member):
    client = APIClient()
    client.force_authenticate(member)
    assert_error(client.get(url), 403, "not_permitted")
    assert_error(client.post(url, {"slug": "x", "name": "X"}, format="json"), 403)


@pytest.mark.parametrize("url", ENDPOINTS)
def test_anonymous_is_refused_with_a_code(url):
    client = APIClient()
    for response in (client.get(url), client.post(url, {"slug": "x"}, format="json")):
        assert response.status_code in (401, 403)
        assert_error(response, response.status_code)
    assert not Provider.objects.exists() and not Snippet.objects.exists()


def test_non_staff_cannot_read_or_change_a_configuration(member):
    make_configuration("desk")
    client = APIClient()
    client.force_authenticate(member)
    assert_error(client.get("/api/configurations/desk/"), 403)
    assert_error(client.patch("/api/configurations/desk/", {"name": "x"}, format="json"), 403)
    assert_error(client.delete("/api/configurations/desk/"), 403)
    assert Configuration.objects.get(slug="desk").name == "Desk"


@pytest.mark.parametrize("url", ENDPOINTS)
def test_malformed_json_is_a_400_malformed(api, url):
    response = api.post(url, data='{"slug": "x", ', content_type="application/json")
    assert_error(response, 400, "malformed")


@pytest.mark.parametrize(
    "url",
    [
        "/api/providers/nope/",
        "/api/configurations/nope/",
        "/api/snippets/987654/",
        "/api/skills/987654/",
        "/api/snippets/not-a-number/",
    ],
)
def test_unknown_ids_and_slugs_are_404_not_found(api, url):
    assert_error(api.get(url), 404, "not_found")
    assert_error(api.patch(url, {"name": "x"}, format="json"), 404, "not_found")
    assert_error(api.delete(url), 404, "not_found")


# --- admin: the fallback inline validates cycles -------------------------------------------


def admin_form(configuration, fallback_ids, **overrides):
    data = {
        "slug": configuration.slug,
        "name": configuration.name,
        "provider": "",
        "model": configuration.model,
        "active": "on",
        "system_prompt": "",
        "system_prompt_data_class": "",
        "allowed_tools": "[]",
        "approval_exempt_tools": "[]",
        "modes": "{}",
        "max_tool_calls": "10",
        "tool_timeout_seconds": "30",
        "context_budget_tokens": "32000",
        "approval_timeout_seconds": "86400",
        "approvals_required": "1",
        "script": "{}",
        "_save": "Save",
    }
    for prefix in ("configurationsnippet_set", "configurationskill_set"):
        data.update(
            {
                f"{prefix}-TOTAL_FORMS": "0",
                f"{prefix}-INITIAL_FORMS": "0",
                f"{prefix}-MIN_NUM_FORMS": "0",
                f"{prefix}-MAX_NUM_FORMS": "1000",
            }
        )
    data.update(
        {
            "fallback_links-TOTAL_FORMS": str(len(fallback_ids)),
            "fallback_links-INITIAL_FORMS": "0",
            "fallback_links-MIN_NUM_FORMS": "0",
            "fallback_links-MAX_NUM_FORMS": "1000",
        }
    )
    for i, pk in enumerate(fallback_ids):
        data[f"fallback_links-{i}-fallback"] = str(pk)
        data[f"fallback_links-{i}-position"] = str(i)
        data[f"fallback_links-{i}-configuration"] = str(configuration.pk)
    data.update(overrides)
    return data


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def test_admin_fallback_inline_saves_a_valid_chain(admin_client):
    """Control: the same form without a cycle saves, so the refusals below are the cycle."""
    b = make_configuration("cfg-b", provider=None)
    c = make_configuration("cfg-c", provider=None)
    response = admin_client.post(
        f"/admin/agentruns/configuration/{b.pk}/change/", admin_form(b, [c.pk])
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert state("cfg-b")["fallbacks"] == ["cfg-c"]


def test_admin_fallback_inline_refuses_a_cycle_with_a_clear_message(admin_client):
    a = make_configuration("cfg-a", provider=None)
    b = make_configuration("cfg-b", provider=None, fallbacks=[a])
    before_a, before_b = state("cfg-a"), state("cfg-b")
    response = admin_client.post(
        f"/admin/agentruns/configuration/{a.pk}/change/",
        admin_form(a, [b.pk], name="Renamed"),
    )
    assert response.status_code == 200  # the form comes back with the error
    html = response.content.decode()
    assert "Fallbacks would form a cycle" in html
    assert "cfg-a" in html and "cfg-b" in html
    assert (state("cfg-a"), state("cfg-b")) == (before_a, before_b)


def test_admin_fallback_inline_refuses_itself_as_fallback(admin_client):
    a = make_configuration("cfg-a", provider=None)
    response = admin_client.post(
        f"/admin/agentruns/configuration/{a.pk}/change/", admin_form(a, [a.pk], name="Renamed")
    )
    assert response.status_code == 200
    assert "cannot be its own fallback" in response.content.decode()
    assert state("cfg-a") == {
        "name": "Cfg A",
        "model": "",
        "snippets": [],
        "skills": [],
        "fallbacks": [],
    }


# --- INT-1, INT-3: options for servers other than OpenAI's ---------------------------------


def test_int1_provider_options_are_settable_with_defaults_that_suit_openai(api):
    created = api.post(
        "/api/providers/",
        {"slug": "llama", "name": "llama.cpp", "base_url": "http://127.0.0.1:8080/v1"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    defaults = {k: created.json()[k] for k in ("tool_choice", "max_output_tokens", "extra_body")}
    assert defaults == {"tool_choice": "auto", "max_output_tokens": None, "extra_body": {}}
    options = {
        "tool_choice": "omit",
        "max_output_tokens": 512,
        "context_window_tokens": 4096,
        "extra_body": {"cache_prompt": True},
    }
    patched = api.patch("/api/providers/llama/", options, format="json")
    assert patched.status_code == 200, patched.json()
    provider = Provider.objects.get(slug="llama")
    assert {k: getattr(provider, k) for k in options} == options


@pytest.mark.parametrize(
    "extra_body",
    [["not", "an", "object"], {"pad": "x" * 5000}, {"messages": []}, {"tool_choice": "none"}],
)
def test_int1_extra_body_is_a_bounded_object_that_cannot_replace_the_request(api, extra_body):
    make_provider("p", kind="openai")
    response = api.patch("/api/providers/p/", {"extra_body": extra_body}, format="json")
    assert_error(response, 400)
    assert Provider.objects.get(slug="p").extra_body == {}


def test_int3_a_configurations_tool_timeout_is_settable_within_1_to_600(api):
    make_configuration("desk")
    patched = api.patch("/api/configurations/desk/", {"tool_timeout_seconds": 90}, format="json")
    assert patched.status_code == 200, patched.json()
    assert patched.json()["tool_timeout_seconds"] == 90
    assert Configuration.objects.get(slug="desk").tool_timeout_seconds == 90
    for wrong in (0.5, 601):
        refused = api.patch(
            "/api/configurations/desk/", {"tool_timeout_seconds": wrong}, format="json"
        )
        assert_error(refused, 400)
    assert Configuration.objects.get(slug="desk").tool_timeout_seconds == 90
