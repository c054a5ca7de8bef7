"""DBOS on PostgreSQL, running the reference workload: every model turn and every tool call
is a durable `@DBOS.step` of one workflow (SPEC §14, PERF-1, PERF-3).

One JSON line per shape: ms per durable step, bytes stored per run (every row of DBOS's
system tables keyed by the run's workflow id).
"""

from __future__ import annotations

from dbos import DBOS, SetWorkflowID

from agentruns.bench.peers.common import database, measure, shapes, stored_bytes

SHAPE = {"turns": 10, "calls": 2}


@DBOS.step()
def model_turn(turn: int) -> list[dict[str, int]]:
    if turn >= SHAPE["turns"]:
        return []
    return [{"x": i} for i in range(SHAPE["calls"])]


@DBOS.step()
def noop(x: int) -> str:
    return str(x)


@DBOS.workflow()
def agent_run() -> str:
    turn = 0
    while True:
        calls = model_turn(turn)
        if not calls:
            return "done"
        for call in calls:
            noop(call["x"])
        turn += 1


def run(workflow_id: str) -> None:
    with SetWorkflowID(workflow_id):
        assert agent_run() == "done"


def main() -> None:
    url = database()
    DBOS(config={"name": "agentruns-peer", "system_database_url": url})
    DBOS.launch()
    try:
        for turns, calls, runs in shapes():
            SHAPE.update(turns=turns, calls=calls)
            measure(
                "dbos",
                run,
                turns,
                calls,
                runs,
                lambda ids: stored_bytes(url, "dbos", "workflow_uuid", ids),
            )
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main()
