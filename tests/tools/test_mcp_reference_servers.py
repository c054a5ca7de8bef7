"""INT-3, INT-4 against software nobody here wrote: the reference MCP servers from PyPI
(`mcp-server-time`, `mcp-server-git`, test dependencies) over stdio, as a deployer lists
them. A stdio server starts in a directory of its own (never the checkout) with only the
variables listed for it, runs as one session per process, is restarted when it dies and
reaped at once; a write whose server hung and was killed mid-call is `uncertain`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentruns import events as ev
from agentruns.cluster.process import wait_for
from agentruns.models import McpTool, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.tools.mcp.client import Endpoint, call_tool, list_tools
from agentruns.tools.mcp.sessions import sessions
from tests.support.catalog import scripted_configuration
from tests.support.hitl import results_by_call
from tests.support.mcp import pin, register
from tests.support.runs import submit

pytest.importorskip("mcp_server_time")
pytest.importorskip("mcp_server_git")

pytestmark = pytest.mark.django_db

TIME = Endpoint("clock", "stdio", command="time")
GIT = Endpoint("repo", "stdio", command="git")


def children(pattern: str) -> dict[int, str]:
    """This process's children whose command line holds `pattern`, by pid, with their
    state (`Z`: exited and not reaped)."""
    found = {}
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as listed:
                pids = [int(pid) for pid in listed.read().split()]
        except FileNotFoundError:
            continue  # a thread that exited since the listing (its children moved on)
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    command = cmdline.read().replace(b"\0", b" ").decode()
                with open(f"/proc/{pid}/stat") as stat:
                    state = stat.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if pattern in command or state == "Z":
                found[pid] = state
    return found


@pytest.fixture
def repository(tmp_path) -> Path:
    """A git repository with one commit and one untracked file."""
    path = tmp_path / "repo"
    path.mkdir()
    for command in (
        ["git", "init", "-q", "-b", "main"],
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@x",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ],
    ):
        subprocess.run(command, cwd=path, check=True)
    (path / "untracked-here.txt").write_text("x")
    return path


@pytest.fixture
def listed(settings, tmp_path, repository):
    settings.AGENTRUNS_MCP_STDIO_ROOT = str(tmp_path / "mcp-root")
    settings.AGENTRUNS_MCP_STDIO_COMMANDS = {
        "time": {
            "command": [sys.executable, "-m", "mcp_server_time"],
            "env": {"TZ": "Pacific/Auckland"},
        },
        "git": [sys.executable, "-m", "mcp_server_git"],
        "git-here": {"command": [sys.executable, "-m", "mcp_server_git"], "cwd": str(repository)},
    }
    return settings


def test_int4_a_stdio_server_gets_only_the_variables_listed_for_it(listed):
    """`TZ` listed for mcp-server-time reaches it: its tools name that zone as local."""
    tools = {tool["name"]: tool for tool in list_tools(TIME, timeout=30)}
    schema = str(tools["get_current_time"]["input_schema"])
    assert "Pacific/Auckland" in schema


def test_int4_a_stdio_server_starts_in_a_directory_of_its_own_never_the_checkout(
    listed, repository
):
    """`git_status` of "." is the deployer's repository when its cwd is named, and no
    repository at all by default (it was agentruns' own checkout)."""
    mine = call_tool(
        Endpoint("here", "stdio", command="git-here"),
        "git_status",
        {"repo_path": "."},
        timeout=30,
    )
    assert mine.ok, mine.content
    assert "untracked-here.txt" in mine.content

    default = call_tool(GIT, "git_status", {"repo_path": "."}, timeout=30)
    assert not default.ok
    assert "agentruns" not in default.content and "pyproject.toml" not in default.content
    assert (Path(listed.AGENTRUNS_MCP_STDIO_ROOT) / "git").is_dir()


def test_int4_one_session_per_server_restarted_when_it_dies_and_reaped_at_once(listed):
    """Two calls share one server process; once it is killed, the next call runs on a
    new one and the dead one is no child of this process any more (no zombie)."""
    arguments = {"timezone": "UTC"}
    assert call_tool(TIME, "get_current_time", arguments, timeout=30).ok
    [first] = children("mcp_server_time")
    assert call_tool(TIME, "get_current_time", arguments, timeout=30).ok
    assert list(children("mcp_server_time")) == [first]

    os.kill(first, signal.SIGKILL)
    wait_for(lambda: first not in children(""), timeout=20, what="the dead server reaped")
    assert call_tool(TIME, "get_current_time", arguments, timeout=30).ok
    [second] = children("mcp_server_time")
    assert second != first


def git_write_run(staff, server_slug: str) -> Run:
    turns: list[dict] = [
        {
            "tool_calls": [
                {
                    "id": "w1",
                    "name": f"{server_slug}.git_create_branch",
                    "arguments": {"repo_path": ".", "branch_name": "feature"},
                }
            ]
        },
        {"text": "done"},
    ]
    scripted_configuration(
        "brancher",
        turns,
        allowed_tools=[f"{server_slug}.*"],
        approval_exempt_tools=[f"{server_slug}.git_create_branch"],
        tool_timeout_seconds=1,
    )
    return submit(staff, "brancher")


def test_int3_a_write_whose_server_hung_and_was_killed_mid_call_is_uncertain(listed, staff):
    """INT-3, TOOL-4: mcp-server-git is stopped (SIGSTOP) so the write's request is sent
    and never answered; past the tool timeout it is killed. The call is `uncertain`,
    never an error the model could retry, and the next call starts a new server."""
    server = pin(register("repo", transport="stdio", command="git-here"))
    McpTool.objects.filter(server=server).update(effect="write")
    server.save()
    [pid] = children("mcp_server_git")
    run = git_write_run(staff, "repo")
    os.kill(pid, signal.SIGSTOP)
    try:
        assert execute_run(run.pk) == Run.Status.COMPLETED
    finally:
        os.kill(pid, signal.SIGKILL)
    result = results_by_call(run.pk)["w1"]
    assert result["status"] == ev.UNCERTAIN, result
    assert (
        "Outcome unknown" in result["content"]
        and "did not answer within 1 s" in (result["content"])
    )
    invocation = ToolInvocation.objects.get(run=run, call_id="w1")
    assert invocation.status == ToolInvocation.Status.UNCERTAIN
    # Its session notices the ended connection at its next check, drops it and reaps it.
    wait_for(
        lambda: pid not in children("") and not sessions().holds("repo"),
        timeout=20,
        what="the killed server reaped and its session dropped",
    )
    assert call_tool(
        Endpoint("repo", "stdio", command="git-here"), "git_status", {"repo_path": "."}, timeout=30
    ).ok
