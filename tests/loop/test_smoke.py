import pytest

from agentruns.models import Configuration, Event, Note, Provider, Run
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit

pytestmark = pytest.mark.django_db


def test_scripted_two_tool_run_completes(staff):
    provider = Provider.objects.create(slug="s", name="S", kind="scripted", trust_zone="local")
    Configuration.objects.create(
        slug="c",
        name="C",
        provider=provider,
        model="m",
        allowed_tools=["clock.now", "notes"],
        approval_exempt_tools=["notes.write"],
        script={
            "turns": [
                {
                    "tool_calls": [
                        {"name": "clock.now", "arguments": {}},
                        {"name": "notes.write", "arguments": {"title": "t", "body": "b"}},
                    ]
                },
                {"text": "done"},
            ]
        },
    )
    run, created = run_submit(user=staff, submission=Submission(configuration="c", input="go"))
    assert created
    assert execute_run(run.pk) == "completed"
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED
    assert run.final_reply == "done"
    types = list(Event.objects.filter(run=run).order_by("sequence").values_list("type", flat=True))
    assert types == [
        "message.user",
        "message.assistant",
        "tool.result",
        "tool.result",
        "message.assistant",
        "run.completed",
    ]
    assert Note.objects.count() == 1
