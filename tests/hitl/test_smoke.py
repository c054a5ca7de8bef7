import pytest

from agentruns.models import Note, Run
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_provider

pytestmark = pytest.mark.django_db


def test_allow_then_deny_in_one_turn_reach_the_model_in_order(api, staff):
    grant(staff, "approve_run")
    make_configuration(
        "c",
        provider=make_provider("s", zone="local"),
        allowed_tools=["notes"],
        script={
            "turns": [
                {
                    "tool_calls": [
                        {"name": "notes.write", "arguments": {"title": "a", "body": "1"}},
                        {"name": "notes.write", "arguments": {"title": "b", "body": "2"}},
                    ]
                },
                {"text": "done"},
            ]
        },
    )
    run_id = api.post("/api/runs/", {"configuration": "c", "input": "go"}, format="json").json()[
        "id"
    ]
    assert execute_run(run_id) == "awaiting"
    first = api.get(f"/api/runs/{run_id}/").json()["ticket"]
    body = {k: first[k] for k in ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")}
    allow = {
        **body,
        "call_id": first["target"]["call_id"],
        "result": {"kind": "permission", "decision": "allow"},
    }
    assert api.post(f"/api/runs/{run_id}/resume/", allow, format="json").status_code == 200
    again = api.post(f"/api/runs/{run_id}/resume/", allow, format="json")
    assert again.status_code == 409 and again.json()["code"] == "not_awaiting"
    assert execute_run(run_id) == "awaiting"
    second = api.get(f"/api/runs/{run_id}/").json()["ticket"]
    assert second["target"]["call_id"] != first["target"]["call_id"]
    body = {k: second[k] for k in ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")}
    deny = {
        **body,
        "call_id": second["target"]["call_id"],
        "result": {"kind": "permission", "decision": "deny", "note": "no"},
    }
    assert api.post(f"/api/runs/{run_id}/resume/", deny, format="json").status_code == 200
    assert execute_run(run_id) == "completed"
    assert Run.objects.get(pk=run_id).final_reply == "done"
    assert list(Note.objects.values_list("title", flat=True)) == ["a"]
