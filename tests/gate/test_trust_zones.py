"""Data classes and trust zones (TZ-1..TZ-4)."""

from __future__ import annotations

import pytest

from agentruns.classes import DataClass, Zone, parse_class, parse_zone
from agentruns.gate.core import decide, reachable_zone
from agentruns.gate.lookups import config_view
from agentruns.models import Configuration, Provider
from agentruns.providers.base import Link, link_for
from tests.support.catalog import make_configuration, make_provider
from tests.support.gate_values import link, source, view

CLASSES = ["public", "internal", "confidential", "restricted", "secret"]
ZONES = ["local", "private_hosted", "external_eu", "external_global"]


# --- TZ-1 ---------------------------------------------------------------------------------


def test_tz1_classes_form_one_total_order():
    parsed = [parse_class(name) for name in CLASSES]
    assert all(c is not None for c in parsed)
    assert parsed == sorted(parsed)
    assert len(set(parsed)) == len(CLASSES)
    assert DataClass.PUBLIC < DataClass.INTERNAL < DataClass.CONFIDENTIAL
    assert DataClass.CONFIDENTIAL < DataClass.RESTRICTED < DataClass.SECRET


@pytest.mark.parametrize("raw", ["", None, "   ", "top-secret", "unknown", "publicx"])
def test_tz1_empty_or_unknown_class_is_undeclared(raw):
    assert parse_class(raw) is None


@pytest.mark.parametrize("raw", [" Secret ", "PUBLIC", "internal\n"])
def test_tz1_stored_class_is_parsed_ignoring_case_and_whitespace(raw):
    assert parse_class(raw) is not None


def test_tz1_undeclared_never_wins_a_comparison():
    """An undeclared source next to a public one: the public one decides (TZ-1, CG-3)."""
    decision = decide(view(), [source("loud", "nonsense"), source("quiet", "public")])
    assert decision.source is not None and decision.source.name == "quiet"


# --- TZ-2: the full matrix -----------------------------------------------------------------

CEILING = {
    "local": "secret",
    "private_hosted": "restricted",
    "external_eu": "confidential",
    "external_global": "internal",
}


def test_tz2_zones_are_ordered_most_to_least_trusted_with_fixed_ceilings():
    zones = [parse_zone(name) for name in ZONES]
    assert zones == sorted(zones)
    assert {zone.label: zone.ceiling.label for zone in zones} == CEILING


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("data_class", CLASSES)
def test_tz2_zone_permits_class_iff_class_at_most_ceiling(zone, data_class):
    expected = CLASSES.index(data_class) <= CLASSES.index(CEILING[zone])
    assert parse_zone(zone).permits(parse_class(data_class)) is expected
    # ...and the gate agrees, end to end over plain values.
    decision = decide(view(zone=zone), [source("s", data_class)])
    assert decision.verdict.value == ("permitted" if expected else "refused")
    assert decision.zone is not None and decision.zone.label == zone


# --- TZ-3 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", ["", None, "moon", "EXTERNAL-EU", "localhost"])
def test_tz3_empty_or_unknown_zone_is_external_global(raw):
    assert parse_zone(raw) is Zone.EXTERNAL_GLOBAL


def test_tz3_known_zone_parsed_ignoring_case_and_whitespace():
    assert parse_zone(" Local ") is Zone.LOCAL


@pytest.mark.django_db
def test_tz3_new_provider_defaults_to_external_global():
    provider = Provider.objects.create(slug="fresh", name="Fresh")
    provider.refresh_from_db()
    assert provider.trust_zone == "external_global"


@pytest.mark.django_db
@pytest.mark.parametrize("stored", ["", "moon"])
def test_tz3_stored_empty_or_unknown_zone_gates_as_external_global(stored):
    provider = make_provider("odd", zone="local")
    Provider.objects.filter(pk=provider.pk).update(trust_zone=stored)  # bypass choices
    configuration = make_configuration("c", provider=provider)
    configuration = Configuration.objects.get(pk=configuration.pk)  # fresh provider row
    assert configuration.provider.trust_zone == stored
    assert reachable_zone(config_view(configuration)) is Zone.EXTERNAL_GLOBAL


# --- TZ-4 ---------------------------------------------------------------------------------


def test_tz4_weaker_fallback_drags_the_reachable_zone_down():
    config = view(zone="local", fallbacks=[link("fb", "external_eu")])
    assert reachable_zone(config) is Zone.EXTERNAL_EU
    decision = decide(config, [source("s", "restricted")])
    assert decision.refused
    assert decision.zone is Zone.EXTERNAL_EU


def test_tz4_stronger_fallback_does_not_raise_the_ceiling():
    config = view(zone="external_eu", fallbacks=[link("fb", "local")])
    assert reachable_zone(config) is Zone.EXTERNAL_EU


def test_tz4_the_least_trusted_of_several_fallbacks_counts():
    config = view(
        zone="local",
        fallbacks=[link("a", "private_hosted"), link("b", "external_global"), link("c", "local")],
    )
    assert reachable_zone(config) is Zone.EXTERNAL_GLOBAL


def test_tz4_missing_primary_provider_counts_as_external_global():
    assert reachable_zone(view(zone=None)) is Zone.EXTERNAL_GLOBAL


def test_tz4_fallback_without_provider_counts_as_external_global():
    config = view(zone="local", fallbacks=[link("orphan", None)])
    assert reachable_zone(config) is Zone.EXTERNAL_GLOBAL


@pytest.mark.django_db
def test_tz4_fallbacks_own_fallbacks_are_not_walked():
    """A → B → C with C the weakest: A's zone is min(A, B), C is ignored."""
    c = make_configuration("c", provider=make_provider("pc", zone="external_global"))
    b = make_configuration("b", provider=make_provider("pb", zone="private_hosted"), fallbacks=[c])
    a = make_configuration("a", provider=make_provider("pa", zone="local"), fallbacks=[b])
    a_view = config_view(a)
    assert [link.slug for link in a_view.chain] == ["a", "b"]
    assert reachable_zone(a_view) is Zone.PRIVATE_HOSTED
    # B itself does see C.
    assert reachable_zone(config_view(b)) is Zone.EXTERNAL_GLOBAL


@pytest.mark.django_db
def test_tz4_fallback_chain_keeps_configured_order():
    fbs = [
        make_configuration(slug, provider=make_provider(f"p{slug}", zone="local"))
        for slug in ("z", "m", "a")
    ]
    primary = make_configuration("primary", fallbacks=fbs)
    assert [link.slug for link in config_view(primary).fallbacks] == ["z", "m", "a"]


@pytest.mark.django_db
def test_tz4_missing_provider_in_database_counts_as_external_global():
    """Primary without provider, and a fallback whose provider was deleted (SET_NULL)."""
    no_provider = make_configuration("bare", provider=None)
    assert reachable_zone(config_view(no_provider)) is Zone.EXTERNAL_GLOBAL

    doomed = make_provider("doomed", zone="local")
    fallback = make_configuration("fb", provider=doomed)
    primary = make_configuration(
        "main", provider=make_provider("pm", zone="local"), fallbacks=[fallback]
    )
    assert reachable_zone(config_view(primary)) is Zone.LOCAL
    doomed.delete()
    assert reachable_zone(config_view(primary)) is Zone.EXTERNAL_GLOBAL


@pytest.mark.django_db
def test_tz4_every_dispatchable_configuration_is_one_the_walk_saw():
    """Inactive fallbacks or providers are not attempted, but are still in the walk; every
    link the dispatcher may attempt is in `chain` and its zone is within the reachable one."""
    inactive_provider = make_provider("off", zone="external_global", active=False)
    fb_off_provider = make_configuration("fb-off-provider", provider=inactive_provider)
    fb_inactive = make_configuration(
        "fb-inactive", provider=make_provider("p-eu", zone="external_eu"), active=False
    )
    fb_ok = make_configuration("fb-ok", provider=make_provider("p-ph", zone="private_hosted"))
    primary = make_configuration(
        "primary",
        provider=make_provider("p-local", zone="local"),
        fallbacks=[fb_off_provider, fb_inactive, fb_ok],
    )
    cv = config_view(primary, hop=link_for)  # the runtime's view: hops that are links
    dispatchable = [lk.slug for lk in cv.chain if isinstance(lk, Link) and lk.dispatchable]
    assert dispatchable == ["primary", "fb-ok"]
    walked = {lk.slug for lk in cv.chain}
    assert set(dispatchable) <= walked
    assert walked == {"primary", "fb-off-provider", "fb-inactive", "fb-ok"}
    zone = reachable_zone(cv)
    assert all(lk.zone <= zone for lk in cv.chain)
    # Conservative: the non-dispatchable weakest link still lowers the ceiling.
    assert zone is Zone.EXTERNAL_GLOBAL
