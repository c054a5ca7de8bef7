"""The layout's mechanical rules that import-linter cannot state (issue 16): which
database the project runs on is the store's knowledge alone, the loop's rows go through the
store, and a name means one thing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import agentruns
import playground
from agentruns.errors import NotPermitted, ResumeError

PACKAGE = Path(agentruns.__file__).parent
# The project's code; config/settings.py is where DATABASE_URL chooses the database.
SOURCES = [PACKAGE, Path(playground.__file__).parent]
# Ways to ask which database this is: a connection's vendor, a settings ENGINE, a backend.
VENDOR_CHECK = re.compile(
    r"\.vendor\b|\[\s*[\"']ENGINE[\"']\s*\]|db\.backends\.(postgresql|sqlite3|mysql|oracle)"
)


def test_nothing_outside_the_store_checks_the_database_vendor():
    """The store chooses its implementation (and the pool) once; everyone else asks it."""
    offenders = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            relative = path.relative_to(root.parent)
            if relative.parts[:2] in (("agentruns", "store"), ("agentruns", "migrations")):
                continue
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if VENDOR_CHECK.search(line):
                    offenders.append(f"{relative}:{number}: {line.strip()}")
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


def _module_level_names() -> dict[str, list[str]]:
    """Every class and type alias defined at the top of a module, by name."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                continue
            for name in names:
                found.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    return found


@pytest.mark.parametrize("name", ["Executor", "Outcome", "Enforcement", "LogEntry", "Lease"])
def test_a_name_that_once_meant_two_things_is_defined_once(name):
    """One meaning per name (issue 16): the loop's `Executor` is not also the tools'
    function type, the loop's `Outcome` not also a webhook attempt's, one `Enforcement`
    for the setting and the audit row, one in-memory log entry (`ev` is the vocabulary,
    `Event` the row)."""
    assert len(_module_level_names().get(name, [])) == 1


def test_the_old_double_names_are_gone():
    names = _module_level_names()
    assert "Ev" not in names and "LogEvent" not in names
    assert not issubclass(NotPermitted, ResumeError)  # cancelling is no resume
