"""Running the peers of SPEC §14 beside ours: their virtual environment (made on first use,
never a project dependency), their child processes, and the result every benchmark writes
(JSON, and a PNG drawn by the peers' matplotlib).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser
from django.db import connection

from agentruns.store.connection import database_url

PEERS = Path(__file__).parent / "peers"
REQUIREMENTS = PEERS / "requirements.txt"
STAMP = ".agentruns-peers"
PEER_TIMEOUT = 1800


class PeerFailed(RuntimeError):
    pass


def peer_venv() -> Path:
    return Path(os.environ.get("AGENTRUNS_PEER_VENV", Path(settings.BASE_DIR) / ".venv-peers"))


def _requirements_digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]


def peer_python(*, install: bool, say: Callable[[str], None] = print) -> Path | None:
    """The peers' interpreter, after installing `requirements.txt` into a fresh virtual
    environment when it is missing or its pins changed (and `install` allows it)."""
    venv = peer_venv()
    python = venv / "bin" / "python"
    stamp = venv / STAMP
    if python.exists() and stamp.exists() and stamp.read_text().strip() == _requirements_digest():
        return python
    if not install:
        return None
    say(f"installing the peers into {venv} (once; never project dependencies)...")
    started = time.monotonic()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)],
        check=True,
        timeout=PEER_TIMEOUT,
    )
    stamp.write_text(_requirements_digest() + "\n")
    say(f"peers installed in {time.monotonic() - started:.0f} s")
    return python


def csv_ints(raw: str) -> list[int]:
    return [int(item) for item in raw.split(",") if item.strip()]


def add_options(parser: CommandParser, name: str, *, peers: str) -> None:
    """The options every benchmark shares: where its peers come from, where it writes."""
    parser.add_argument(
        "--peers",
        choices=["install", "present", "skip"],
        default=peers,
        help="install: make .venv-peers when missing; present: use it only if it is there "
        "(the peers and the plot's matplotlib run from it); skip: ours alone, no plot.",
    )
    out = Path(settings.VAR_DIR) / "bench"
    parser.add_argument("--json", default=str(out / f"{name}.json"))
    parser.add_argument("--plot", default=str(out / f"{name}.png"), help="'' for none.")


def peers_chosen(choice: str, say: Callable[[str], None]) -> Path | None:
    """The peers' interpreter as `--peers` asks for it (None: no peers, no plot)."""
    return None if choice == "skip" else peer_python(install=choice == "install", say=say)


def peer_versions(python: Path | None) -> dict[str, str]:
    if python is None:
        return {}
    names = [line.split("==")[0].split("[")[0] for line in _pins()]
    code = (
        "import importlib.metadata as m, json, sys; "
        "print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [str(python), "-c", code, *names], capture_output=True, text=True, check=False
    )
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _pins() -> list[str]:
    lines = REQUIREMENTS.read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def run_peer(
    python: Path | str, module: str, env: Mapping[str, str], *, timeout: float = PEER_TIMEOUT
) -> list[dict[str, Any]]:
    """Run `agentruns.bench.peers.<module>` and return the JSON objects it printed."""
    base = Path(settings.BASE_DIR)
    process = subprocess.run(
        [str(python), "-m", f"agentruns.bench.peers.{module}"],
        cwd=base,
        env={**os.environ, "PYTHONPATH": str(base), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    results = [
        json.loads(line) for line in process.stdout.splitlines() if line.startswith('{"peer"')
    ]
    if process.returncode != 0 or not results:
        tail = (process.stderr or process.stdout).strip().splitlines()[-5:]
        raise PeerFailed(f"{module} exited {process.returncode}: " + " | ".join(tail))
    return results


def peer_database(peer: str) -> str:
    """Each peer keeps its tables in a database of its own, named after ours."""
    return database_url(f"{connection.settings_dict['NAME']}_{peer}")


def spread(values: Sequence[float]) -> dict[str, Any]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "values": list(values),
    }


def by_size(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[int, dict]:
    """Each size's spread of each figure over its batches, smallest size first: one batch
    of a thousand runs on two shared cores varies by tens of points from the next."""
    sizes: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        sizes.setdefault(row["in_flight"], []).append(row)
    return {
        n: {
            key: spread([row[key] for row in batches])
            for key in keys
            if all(row.get(key) is not None for row in batches)
        }
        for n, batches in sorted(sizes.items())
    }


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    """Where the figures came from: they mean little without it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version')")
        server = cursor.fetchone()[0]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
        "cores": os.cpu_count(),
        "cpu": _cpu(),
        "memory_gb": _memory_gb(),
        "load_before": round(os.getloadavg()[0], 2),
        "postgresql": server,
        "python": platform.python_version(),
        "commit": _commit(),
    }


def write_result(
    result: dict[str, Any], json_path: Path, plot_path: Path | None, python: Path | None
) -> str:
    """Write the JSON; draw the plot with the peers' matplotlib when they are installed.
    Returns what was written, for the command to print."""
    result["machine"]["load_after"] = round(os.getloadavg()[0], 2)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=2, default=str))
    written = f"wrote {json_path}"
    if plot_path is None:
        return written
    if python is None:
        return f"{written}; no plot (the peers' environment, which has matplotlib, is absent)"
    base = Path(settings.BASE_DIR)
    plot_path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(python), "-m", "agentruns.bench.peers.plot", str(json_path), str(plot_path)],
        cwd=base,
        env={**os.environ, "PYTHONPATH": str(base)},
        check=True,
        timeout=120,
    )
    return f"{written} and {plot_path}"
