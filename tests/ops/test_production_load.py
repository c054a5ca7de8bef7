"""OPS-8 (issue 15, "Also prove"): under the production server. gunicorn (config/gunicorn.py,
four workers) and a cluster run against the test database; 200 concurrent API clients
submit runs that ask their initiator a question, poll them, answer them and poll them to
the end, while one gunicorn worker is SIGKILLed a third of the way through. Then:

- no response is a 5xx; the only failures are the killed worker's in-flight requests
  (a sync worker holds one), seen as a dropped connection around the kill;
- the master replaced the worker;
- no run is lost: every submission (retried with its Idempotency-Key after a dropped
  connection) is exactly one run, and every run completed.

`AGENTRUNS_LOAD_SECONDS` is how long the clients keep starting runs (default 15, the CI
value; the issue's minute is `AGENTRUNS_LOAD_SECONDS=60`); `AGENTRUNS_LOAD_CLIENTS` how
many there are (default 200).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token

from agentruns.cluster.process import descendants, group_pids, wait_for
from agentruns.models import Run
from agentruns.store.connection import database_url
from tests.support.clusters import configuration, running_clusters

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
LOAD_SECONDS = float(os.environ.get("AGENTRUNS_LOAD_SECONDS", "15"))
CLIENTS = int(os.environ.get("AGENTRUNS_LOAD_CLIENTS", "200"))
USERS = 20
WORKERS = 4
POLL_SECONDS = 0.3
ASK = {"id": "ask", "name": "ask_user", "arguments": {"question": "How many?", "schema": {
    "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}  # fmt: skip


@pytest.fixture
def clusters(transactional_db, tmp_path):
    yield from running_clusters(tmp_path)


@dataclass
class Web:
    popen: subprocess.Popen[bytes]
    url: str
    log: Path

    def workers(self) -> list[int]:
        return descendants(self.popen.pid)


@pytest.fixture
def web(transactional_db, tmp_path):
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "AGENTRUNS_WEB_WORKERS": str(WORKERS),
        "AGENTRUNS_THROTTLE_SUBMIT": "1000000/minute",
        "AGENTRUNS_THROTTLE_RESUME": "1000000/minute",
        "AGENTRUNS_LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py"]
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [*command, "--bind", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Web(popen, f"http://127.0.0.1:{port}", log)
    try:
        wait_for(lambda: _answers(server.url), timeout=60, what="gunicorn to answer")
        wait_for(lambda: len(server.workers()) == WORKERS, timeout=60, what="its workers")
        yield server
    finally:
        for pid in group_pids(popen.pid):
            os.kill(pid, signal.SIGKILL)
        popen.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/accounts/login/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Tally:
    started: float = field(default_factory=time.monotonic)
    responses: Counter[int] = field(default_factory=Counter)
    server_errors: list[tuple[float, str, int, str]] = field(default_factory=list)
    dropped: list[tuple[float, str, str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    finished: int = 0

    def now(self) -> float:
        return time.monotonic() - self.started


class Flow:
    """One client: submit, poll until asked, answer, poll until done; again until time."""

    def __init__(self, http: httpx.AsyncClient, token: str, tally: Tally, until: float):
        self.http, self.tally, self.until = http, tally, until
        self.headers = {"Authorization": f"Token {token}"}

    async def call(self, method: str, path: str, **kw) -> httpx.Response:
        """Until a response arrives: a dropped connection (the killed worker) is tried
        again, which is safe for each call here (submission carries its key)."""
        headers = {**self.headers, **kw.pop("headers", {})}
        while True:
            try:
                response = await self.http.request(method, path, headers=headers, **kw)
            except httpx.TransportError as exc:
                self.tally.dropped.append((self.tally.now(), path, type(exc).__name__))
                await asyncio.sleep(0.2)
                continue
            self.tally.responses[response.status_code] += 1
            if response.status_code >= 500:
                self.tally.server_errors.append(
                    (self.tally.now(), path, response.status_code, response.text[:300])
                )
            return response

    async def run_one(self) -> None:
        key = uuid.uuid4().hex
        self.tally.keys.append(key)
        body = {"configuration": "load", "input": "go"}
        submitted = await self.call(
            "POST", "/api/runs/", json=body, headers={"Idempotency-Key": key}
        )
        assert submitted.status_code in (200, 201), submitted.text
        run_id = submitted.json()["id"]
        answered = False
        while True:
            await asyncio.sleep(POLL_SECONDS)
            run = (await self.call("GET", f"/api/runs/{run_id}/")).json()
            if run["status"] == "completed":
                self.tally.finished += 1
                return
            assert run["status"] in ("queued", "running", "awaiting"), run
            ticket = run.get("ticket")
            if run["status"] == "awaiting" and ticket and not answered:
                await self.answer(run_id, ticket)
                answered = True

    async def answer(self, run_id: int, ticket: dict) -> None:
        fields = ("correlation_id", "run", "snapshot_id", "catalog_fingerprint")
        body = {name: ticket[name] for name in fields}
        body["call_id"] = ticket["target"]["call_id"]
        body["result"] = {"kind": "input", "value": {"n": 3}}
        response = await self.call("POST", f"/api/runs/{run_id}/resume/", json=body)
        # 409 not_awaiting: an earlier try got through before its connection dropped.
        assert response.status_code in (200, 409), response.text

    async def loop(self) -> None:
        while time.monotonic() < self.until:
            await self.run_one()


async def load(web: Web, tokens: list[str], tally: Tally) -> float:
    """Run the clients; kill one worker a third of the way; return the kill's time."""
    until = time.monotonic() + LOAD_SECONDS
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=web.url, timeout=60, limits=limits) as http:
        flows = [
            asyncio.create_task(Flow(http, tokens[i % len(tokens)], tally, until).loop())
            for i in range(CLIENTS)
        ]
        await asyncio.sleep(LOAD_SECONDS / 3)
        victim = web.workers()[0]
        os.kill(victim, signal.SIGKILL)
        killed_at = tally.now()
        await asyncio.gather(*flows)
    return killed_at


def test_ops8_200_clients_under_gunicorn_survive_a_killed_worker_and_lose_no_run(web, clusters):
    configuration("load", [{"tool_calls": [ASK]}, {"text": "thanks"}], allowed=["ask_user"])
    users = [get_user_model().objects.create_user(f"load-{i}") for i in range(USERS)]
    tokens = [Token.objects.create(user=user).key for user in users]
    clusters.start("load", AGENTRUNS_Q_WORKERS="2", AGENTRUNS_EXECUTOR_THREADS="64")
    before = set(web.workers())
    tally = Tally()

    killed_at = asyncio.run(load(web, tokens, tally))

    assert tally.server_errors == [], tally.server_errors
    assert len(tally.dropped) <= 1, tally.dropped  # the killed worker's one request
    assert all(killed_at <= at <= killed_at + 5 for at, _, _ in tally.dropped), tally.dropped
    after = set(web.workers())
    assert len(after) == WORKERS and after != before  # the master replaced it
    assert len(set(tally.keys)) == len(tally.keys) == tally.finished
    assert Run.objects.count() == len(tally.keys)  # a retried submission is the same run
    assert set(Run.objects.values_list("status", flat=True)) == {Run.Status.COMPLETED}
    seconds = tally.now()
    print(
        f"\n{CLIENTS} clients, {seconds:.0f}s: {tally.finished} runs, "
        f"{sum(tally.responses.values())} responses ({dict(tally.responses)}), "
        f"{sum(tally.responses.values()) / seconds:.0f}/s, dropped {len(tally.dropped)}"
    )
