"""The layout's mechanical rules that import-linter cannot state: which database the
project runs on is the store's knowledge alone (issue 16)."""

from __future__ import annotations

import re
from pathlib import Path

import agentruns

PACKAGE = Path(agentruns.__file__).parent
# Ways to ask which database this is: a connection's vendor, a settings ENGINE, a backend.
VENDOR_CHECK = re.compile(
    r"\.vendor\b|\[\s*[\"']ENGINE[\"']\s*\]|db\.backends\.(postgresql|sqlite3|mysql|oracle)"
)


def test_nothing_outside_the_store_checks_the_database_vendor():
    """The store chooses its implementation (and the pool) once; everyone else asks it."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ("store", "migrations"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if VENDOR_CHECK.search(line):
                offenders.append(f"agentruns/{relative}:{number}: {line.strip()}")
    assert offenders == []


def test_the_vendor_scan_sees_a_vendor_check():
    """The scan above could pass by matching nothing: it does match the store's own."""
    store = (PACKAGE / "store" / "__init__.py").read_text()
    assert VENDOR_CHECK.search(store)


def test_the_loop_reads_and_writes_its_rows_only_through_the_store():
    """LOOP-3 and DBOS's one system database: the loop's steps issue no ORM query or save
    of their own; every row they read or write is a `SystemStore` call (the
    configuration itself is read, per catalog generation, by runtime/config.py)."""
    orm = re.compile(r"\.objects\b|\.save\(|\.refresh_from_db\(")
    runtime = PACKAGE / "runtime"
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted([*(runtime / "steps").glob("*.py"), runtime / "loop.py"])
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if orm.search(line)
    ]
    assert offenders == []
