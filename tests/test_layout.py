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
PLAYGROUND = Path(playground.__file__).parent
RUNTIME = PACKAGE / "runtime"
# The globs the rules below rely on, by name: a renamed folder then fails the guard test
# instead of leaving a rule that checks nothing (issue 46: `runtime/steps` became
# `runtime/actions`, and the loop's rule checked loop.py alone).
# The package, and the project's code (config/settings.py is where DATABASE_URL chooses
# the database).
PACKAGE_CODE = ((PACKAGE, "**/*.py"),)
SOURCES = (*PACKAGE_CODE, (PLAYGROUND, "**/*.py"))
# The loop: loop.py, its actions and the modules they share.
LOOP = ((RUNTIME, "*.py"), (RUNTIME / "actions", "*.py"))
GLOBS = {"package": PACKAGE_CODE, "sources": SOURCES, "loop": LOOP}
# Ways to ask which database this is: a connection's vendor, a settings ENGINE, a backend.
VENDOR_CHECK = re.compile(
    r"\.vendor\b|\[\s*[\"']ENGINE[\"']\s*\]|db\.backends\.(postgresql|sqlite3|mysql|oracle)"
)
# PostgreSQL's own SQL in a string literal: casts, upserts, its functions and catalogs, jsonb.
POSTGRES_SQL = re.compile(
    r"::[a-z]+\b|\bON CONFLICT\b|\bgen_random_uuid\(|\bpg_[a-z_]+|\bjsonb\b|SKIP LOCKED"
    r"|\bRETURNING\b|\bbigserial\b|\btimestamptz\b"
)
# Asking the store which database it is, or the planner for its estimate.
POSTGRES_QUESTIONS = frozenset({"on_postgres", "explain"})
# Code outside the store that speaks PostgreSQL on purpose, each with its reason.
SPEAKS_POSTGRES = {
    "agentruns/bench/": "the benchmark harness measures the loop and its peers (LangGraph, "
    "the SQL floor) on PostgreSQL: it creates databases, seeds with SQL, sizes rows",
    "agentruns/management/commands/bench": "the `make bench*` commands refuse to run "
    "anywhere but PostgreSQL (PERF figures are PostgreSQL figures) and read its catalogs",
    "agentruns/cluster/startup.py": "the startup line names the database and its pool",
}
# The loop's one module that reads rows with the ORM: the configuration, per catalog
# generation, which is no run's row.
READS_ITS_OWN_ROWS = {"agentruns/runtime/config.py"}


def _files(globs: tuple[tuple[Path, str], ...]) -> list[Path]:
    return sorted({path for root, pattern in globs for path in root.glob(pattern)})


def _relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def _outside_the_store(path: Path) -> bool:
    return not _relative(path).startswith(("agentruns/store/", "agentruns/migrations/"))


@pytest.mark.parametrize("name", sorted(GLOBS))
def test_every_glob_the_layout_rules_rely_on_matches_files(name):
    """A rule over no files passes whatever the code does."""
    for root, pattern in GLOBS[name]:
        assert list(root.glob(pattern)), f"{name}: {root}/{pattern} matches nothing"


def test_the_loop_glob_covers_the_actions():
    loop = {_relative(path) for path in _files(LOOP)}
    assert {"agentruns/runtime/loop.py", "agentruns/runtime/actions/tool_calls.py"} <= loop


def test_nothing_outside_the_store_checks_the_database_vendor():
    """The store chooses its implementation (and the pool) once; everyone else asks it."""
    offenders = []
    for path in filter(_outside_the_store, _files(SOURCES)):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if VENDOR_CHECK.search(line):
                offenders.append(f"{_relative(path)}:{number}: {line.strip()}")
    assert offenders == []


def test_the_vendor_scan_sees_a_vendor_check():
    """The scan above could pass by matching nothing: it does match the store's own."""
    store = (PACKAGE / "store" / "__init__.py").read_text()
    assert VENDOR_CHECK.search(store)


def _speaks_postgres(path: Path) -> list[str]:
    """Where a module writes PostgreSQL's SQL (in a string that is no docstring) or asks
    whether it runs on PostgreSQL; comments and docstrings may name it freely."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and POSTGRES_SQL.search(node.value):
                found.append(f"{_relative(path)}:{node.lineno}: {node.value.strip()[:60]!r}")
        elif isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name in POSTGRES_QUESTIONS:
                found.append(f"{_relative(path)}:{node.lineno}: {name}()")
    return found


def test_nothing_outside_the_store_speaks_postgresql():
    """Issue 46: the vendor check above misses SQL only PostgreSQL runs (the outbox's and
    the day's counters' statements once sat in models/ops.py) and `on_postgres()` asked
    outside the store (selectors.py's row estimate); both now live in the store. What
    remains outside is SPEAKS_POSTGRES, each for its reason."""
    offenders = [
        finding
        for path in filter(_outside_the_store, _files(SOURCES))
        if not _relative(path).startswith(tuple(SPEAKS_POSTGRES))
        for finding in _speaks_postgres(path)
    ]
    assert offenders == []


@pytest.mark.parametrize("prefix", sorted(SPEAKS_POSTGRES))
def test_each_exception_to_the_postgresql_rule_is_still_needed(prefix):
    """An exception whose code moved or went would otherwise hide the next offender."""
    paths = [p for p in _files(SOURCES) if _relative(p).startswith(prefix)]
    assert any(_speaks_postgres(path) for path in paths)


def test_the_postgresql_scan_sees_the_stores_sql():
    """The scan could pass by matching nothing: it finds the store's own SQL and question."""
    found = " ".join(f for path in (PACKAGE / "store").glob("*.py") for f in _speaks_postgres(path))
    assert "ops_sql.py" in found and "on_postgres()" in found


def test_the_loop_reads_and_writes_its_rows_only_through_the_store():
    """LOOP-3 and DBOS's one system database: the loop and its actions issue no ORM query
    or save of their own; every row they read or write is a `SystemStore` call (the
    configuration itself is read, per catalog generation, by runtime/config.py)."""
    orm = re.compile(r"\.objects\b|\.save\(|\.refresh_from_db\(")
    offenders = [
        f"{_relative(path)}:{number}: {line.strip()}"
        for path in _files(LOOP)
        if _relative(path) not in READS_ITS_OWN_ROWS
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if orm.search(line)
    ]
    assert offenders == []


def test_the_loop_scan_sees_an_orm_read():
    """The scan above could pass by matching nothing: it does see config.py's read."""
    assert ".objects" in (RUNTIME / "config.py").read_text()


def _module_level_names() -> dict[str, list[str]]:
    """Every class and type alias defined at the top of a module, by name."""
    found: dict[str, list[str]] = {}
    for path in _files(PACKAGE_CODE):
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
