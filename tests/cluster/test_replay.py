"""GOV-4 on a real cluster: a replay's runs are woken, claimed and driven by the workers
like any run, and there too every tool call is answered from the recording: the effect
file the original wrote is untouched and no ticket opens, though the candidate asks for
approval of the write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentruns import events as ev
from agentruns.models import Event, Run, Ticket
from agentruns.services.replays import replay_start, replay_table
from tests.support.clusters import (
    Clusters,
    assert_log_consistent,
    configuration,
    effect_lines,
    running_clusters,
    wait_statuses,
)
from tests.support.runs import bench_user, submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def write(value: str) -> dict:
    return {"tool_calls": [{"name": "test.external_write", "arguments": {"value": value}}]}


def test_gov4_a_cluster_drives_replays_without_running_a_tool(clusters):
    ledger = configuration(
        "replay-ledger",
        [write("w1"), write("w2"), {"text": "wrote both"}],
        exempt=["test.external_write"],
    )
    originals = submit_batch(ledger, n=3)
    clusters.start("a")
    wait_statuses(originals, "completed", timeout=60, clusters=clusters)
    written = effect_lines(clusters.effect_file)
    assert len(written) == 6
    configuration("replay-candidate", [write("w1"), write("w9"), {"text": "wrote w1"}])

    replay = replay_start(
        user=bench_user(), runs=[run.pk for run in originals], configuration="replay-candidate"
    )
    replays = list(Run.objects.filter(replay=replay))
    wait_statuses(replays, "completed", timeout=60, clusters=clusters)

    assert effect_lines(clusters.effect_file) == written
    assert not Ticket.objects.filter(run__in=replays).exists()
    assert_log_consistent(replays)
    for run in replays:
        results = Event.objects.filter(run=run, type=ev.TOOL_RESULT).order_by("sequence")
        assert [r.payload["status"] for r in results] == ["ok", "error"]
    table = replay_table(replay)
    assert table["status"] == "done"
    assert [row["final_reply_changed"] for row in table["results"]] == [True] * 3
    assert [row["tool_calls"] for row in table["results"]] == [{"added": [], "removed": []}] * 3
