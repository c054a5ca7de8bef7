"""UI-3, UI-6: small slips a new user tripped on. A tool call's duration is its run, not
the approval it waited for; a string that may run to thousands of characters is edited in
a multi-line box, not a one-line input."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import ToolInvocation
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.hitl import active_ticket, allow, client_for, resume
from tests.support.runs import park

pytestmark = pytest.mark.django_db

WAITED = timedelta(seconds=20)


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def test_ui3_a_tool_calls_duration_leaves_out_the_approval_it_waited_for(client, staff):
    approver = grant(staff, "approve_run")
    run = park(approver, "approval-demo")
    assert resume(client_for(approver), run.pk, allow(active_ticket(run.pk))).status_code == 200
    assert execute_run(run.pk) == "completed"
    # The call was planned twenty seconds before the approval came.
    (invocation,) = ToolInvocation.objects.filter(run=run, tool="notes.write")
    ToolInvocation.objects.filter(pk=invocation.pk).update(
        created_at=invocation.created_at - WAITED
    )
    client.force_login(approver)
    page = client.get(f"/playground/runs/{run.pk}/").content.decode()
    shown = [int(ms) for ms in re.findall(r"· (\d+) ms", page)]
    assert shown and max(shown) < WAITED.total_seconds() * 1000


def test_ui6_a_long_string_is_edited_in_a_multi_line_box(client, staff):
    approver = grant(staff, "approve_run")
    ticket = active_ticket(park(approver, "approval-demo").pk)
    client.force_login(approver)
    card = client.get(f"/inbox/{ticket.correlation_id}/").content.decode()
    assert re.search(r'<textarea[^>]*name="[\w.]*body"[^>]*maxlength="20000"', card), card
    assert not re.search(r'<input[^>]*name="[\w.]*body"', card)
