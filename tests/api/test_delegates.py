"""A configuration's `delegates` (DEL-1) over the API, in the admin and in the readout, and
DEL-3's refusal of a configuration that could reach itself through them."""

from __future__ import annotations

import itertools

import pytest

from agentruns.models import Configuration
from agentruns.selectors import run_readouts
from tests.support.catalog import (
    configuration_admin_post,
    make_configuration,
    make_provider,
    make_snippet,
)
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


def delegates_of(slug: str) -> list[str]:
    return list(Configuration.objects.get(slug=slug).delegates.values_list("slug", flat=True))


def test_delegates_are_set_and_read_by_slug_DEL_1(api):
    make_configuration("lookup")
    make_configuration("triage")
    response = api.patch("/api/configurations/triage/", {"delegates": ["lookup"]}, format="json")
    assert response.status_code == 200, response.json()
    assert api.get("/api/configurations/triage/").json()["delegates"] == ["lookup"]
    assert delegates_of("triage") == ["lookup"]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_a_configuration_that_could_reach_itself_is_refused_and_nothing_changes_DEL_3(api, length):
    chain = [make_configuration(f"c{i}") for i in range(length)]
    for here, there in itertools.pairwise(chain):
        here.delegates.set([there])
    response = api.patch(
        f"/api/configurations/{chain[-1].slug}/",
        {"name": "Changed", "delegates": [chain[0].slug]},
        format="json",
    )
    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "invalid"
    last = Configuration.objects.get(pk=chain[-1].pk)
    assert last.name != "Changed" and delegates_of(last.slug) == []


def test_the_admin_ticks_delegates_and_refuses_a_cycle_DEL_1_DEL_3(admin_client):
    lookup = make_configuration("lookup")
    triage = make_configuration("triage")
    lookup.delegates.set([triage])
    url = f"/admin/agentruns/configuration/{triage.pk}/change/"
    page = admin_client.get(url).content.decode()
    assert 'type="checkbox" name="delegates"' in page
    data = configuration_admin_post("triage", "Triage", delegates=[lookup.pk])
    response = admin_client.post(url, data)
    assert response.status_code == 200  # the form again, with the error
    assert "reach itself through delegation" in response.content.decode()
    assert delegates_of("triage") == []


def test_the_readout_lists_what_each_delegate_may_receive_DEL_1_DEL_2(api):
    secret = make_snippet("payroll", data_class="confidential")
    outside = make_configuration("outside", provider=make_provider("far", zone="external_global"))
    inside = make_configuration("inside")
    triage = make_configuration("triage", snippets=[secret])
    triage.delegates.set([outside, inside])
    readout = api.get("/api/configurations/triage/readout/").json()
    rows = {row["configuration"]: row for row in readout["delegates"]}
    assert rows["outside"]["refused"] and not rows["inside"]["refused"]
    assert rows["outside"]["ceiling"] == "internal" and rows["inside"]["ceiling"] == "secret"


def test_the_readout_grants_agent_delegate_where_there_are_delegates_not_no_tools_DEL_1(
    admin_client,
):
    """A configuration with delegates and no other tool offers its model `agent.delegate`:
    the readout's tools say so rather than "No tools: the model can only answer in words"."""
    triage = make_configuration("triage")
    triage.delegates.set([make_configuration("lookup")])
    make_configuration("alone")
    page = admin_client.get("/playground/?configuration=triage").content.decode()
    assert "<code>agent.delegate</code>" in page and "No tools" not in page
    alone = admin_client.get("/playground/?configuration=alone").content.decode()
    assert "No tools: the model can only answer in words." in alone
    assert "<code>agent.delegate</code>" not in alone


def test_a_delegating_runs_readout_grants_agent_delegate_on_every_door_DEL_1_DEL_2(
    admin_client, staff, api
):
    """A run's readout (its page, the admin, the API) lists agent.delegate and its
    delegates like the configuration's does, not "No tools" above the run's own
    agent.delegate calls."""
    triage = make_configuration("triage")
    triage.delegates.set([make_configuration("lookup")])
    run = submit(staff, "triage")  # the API client's user; the superuser sees every run
    for url in (f"/runs/{run.pk}/", f"/admin/agentruns/run/{run.pk}/change/"):
        page = admin_client.get(url).content.decode()
        assert "<code>agent.delegate</code>" in page and "No tools" not in page, url
    readout = api.get(f"/api/runs/{run.pk}/").json()["readout"]
    assert [row["configuration"] for row in readout["delegates"]] == ["lookup"]
    # The inbox's cards read theirs together (PERF-8): the same rows.
    assert run_readouts([run])[run.pk]["delegates"] == readout["delegates"]
