"""The loop's prepared statements, sent straight through libpq (PostgreSQL only).

A durable step is one statement of a few shapes, repeated for every step of every run.
Through a psycopg cursor each execution costs about 100 us of Python on this machine's
reference statement (40 parameters: the cursor's generators, its transformer and the
prepared-statement bookkeeping), as much as the server spends planning-free executing
it. Here a statement is prepared once per connection and shape, its parameters are
formatted as text, and `PGconn.exec_prepared` runs it with the GIL released; the result
comes back as text and is decoded by column type. Anything this module cannot format
goes through the cursor as before.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from functools import lru_cache, partial
from typing import Any
from uuid import UUID

import orjson
import psycopg
from psycopg import errors, pq
from psycopg.postgres import types

from agentruns.store.connection import this_connection

# A result row as the database returned it.
Row = tuple[Any, ...]

_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)
_NO_SUCH_STATEMENT = b"26000"
_NUMBERS = itertools.count()  # statement names, unique within the process


class JsonText(bytes):
    """A JSON document as orjson wrote it, in UTF-8: sent as it is, never decoded and
    encoded again (a step's rows are kilobytes of it). JSON escapes a NUL character, so
    no NUL byte can cut it short."""


class _Unformattable(Exception):
    """A parameter of a type this module does not format: the cursor sends the statement."""


def prepared(sql: str, params: list[Any]) -> Row:
    """The statement's one row (see `prepared_rows`)."""
    rows = prepared_rows(sql, params)
    assert rows, "the statement returned no row"
    return rows[0]


def prepared_rows(sql: str, params: list[Any]) -> list[Row]:
    """Run one of the loop's repeated statements (`%s` placeholders), logged like any
    Django query."""
    db = this_connection()
    db.ensure_connection()
    started = time.monotonic()
    with db.wrap_database_errors:
        rows = _send(db, sql, params)
    if db.queries_logged:
        db.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})
    return rows


def _execute(db: Any, sql: str, params: list[Any]) -> list[Row]:
    conn: psycopg.Connection = db.connection
    try:
        values, oids = _format(params)
    except _Unformattable:
        # Not prepared by psycopg: a session where psycopg holds prepared statements
        # gets DEALLOCATE ALL from it after any rollback, which would take ours too.
        with psycopg.Cursor(conn) as cursor:
            cursor.execute(sql, [_as_text(value) for value in params])
            return cursor.fetchall()
    if conn.prepare_threshold is None:
        # AGENTRUNS_PREPARE=0, behind a transaction-mode pooler: nothing may outlive the
        # statement, so it goes unnamed (parsed and planned each time).
        result = conn.pgconn.exec_params(_numbered(sql), values, oids)
    else:
        result = _run_prepared(conn, sql, values, oids)
    return _rows(_check(result, conn), (sql, oids))


Send = Callable[[Any, str, list[Any]], list[Row]]
# What `prepared_rows` calls: `_execute` itself, or an observer wrapped around it
# (`observed`). Swapped rather than tested for, so that with no observer the hot path is
# the same one call it always was.
_send: Send = _execute


@contextmanager
def observed(observer: Callable[[Send, Any, str, list[Any]], list[Row]]) -> Iterator[None]:
    """Every statement of this module, in every thread of the process, goes through
    `observer(send, db, sql, params)`, which returns what `send(db, sql, params)` returns:
    how a benchmark measures each of the loop's statements (`agentruns/bench/runcost.py`)
    beside Django's `execute_wrapper`, which these statements never pass through."""
    global _send
    unobserved = _send
    _send = partial(observer, unobserved)
    try:
        yield
    finally:
        _send = unobserved


def _rows(result: pq.abc.PGresult, key: tuple[str, tuple[int, ...]]) -> list[Row]:
    decoders = _COLUMNS.get(key)
    if decoders is None or len(decoders) != result.nfields:
        decoders = tuple(
            enumerate(_decoder(result.ftype(column)) for column in range(result.nfields))
        )
        if len(_COLUMNS) >= _COLUMNS_LIMIT:
            _COLUMNS.clear()
        _COLUMNS[key] = decoders
    value = result.get_value
    return [
        tuple(
            None if (raw := value(row, column)) is None else decode(raw)
            for column, decode in decoders
        )
        for row in range(result.ntuples)
    ]


# A statement's result columns' decoders by its text and parameter types (the key of its
# prepared statement, whose result types follow from them): looked up once per process
# rather than a column at a time on every execution (PERF-6). Bounded: the loop has a few
# dozen shapes.
_COLUMNS: dict[tuple[str, tuple[int, ...]], tuple[tuple[int, Callable[[bytes], Any]], ...]] = {}
_COLUMNS_LIMIT = 512


def _as_text(value: Any) -> Any:
    return value.decode() if isinstance(value, JsonText) else value


def _run_prepared(
    conn: psycopg.Connection, sql: str, values: list[bytes | None], oids: tuple[int, ...]
) -> pq.abc.PGresult:
    names = _statements(conn)
    key = (sql, oids)
    while True:
        name = names.get(key)
        if name is None:
            name = f"agentruns_{next(_NUMBERS)}".encode()
            _check(conn.pgconn.prepare(name, _numbered(sql), oids), conn)
            names[key] = name
        # libpq takes None for NULL (as psycopg itself passes it); the stub says bytes only.
        result = conn.pgconn.exec_prepared(name, values)  # type: ignore[arg-type]
        if result.error_field(pq.DiagnosticField.SQLSTATE) != _NO_SUCH_STATEMENT:
            return result
        # The session lost its statements (a DEALLOCATE ALL or DISCARD ALL): prepare
        # again. Outside a transaction the failed attempt ended its own, so try again.
        names.clear()
        if conn.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            return result


def _statements(conn: psycopg.Connection) -> dict[tuple[Any, ...], bytes]:
    """The statements prepared in this connection's session: kept on the connection
    itself, which a pool hands from thread to thread."""
    held: dict[tuple[Any, ...], bytes] | None = getattr(conn, "agentruns_statements", None)
    if held is None:
        held = conn.agentruns_statements = {}  # type: ignore[attr-defined]
    return held


def _format(params: list[Any]) -> tuple[list[bytes | None], tuple[int, ...]]:
    values: list[bytes | None] = []
    oids = []
    for value in params:
        # The commonest kinds inline, without a call each: a step's statement has dozens
        # of parameters (PERF-6).
        kind_of = type(value)
        if value is None:
            values.append(None)
            oids.append(0)
            continue
        if kind_of is JsonText:
            values.append(value)
            oids.append(0)
            continue
        if kind_of is int:
            values.append(b"%d" % value)
            oids.append(_INT8)
            continue
        kind = _PARAMETERS.get(kind_of)
        if kind is None:
            if not isinstance(value, Enum):
                raise _Unformattable(type(value).__name__)
            value = value.value  # a choices member: psycopg walks its MRO on every statement
            kind = _PARAMETERS[type(value)]
        oid, text = kind
        values.append(text(value))
        oids.append(oid)
    return values, tuple(oids)


def _text(value: str) -> bytes:
    if "\x00" in value:  # a text parameter would end at its first NUL byte
        raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    return value.encode()


def _plain(value: Any) -> bytes:
    return str(value).encode()


def _iso(value: date) -> bytes:
    return value.isoformat().encode()


def _flag(value: bool) -> bytes:
    return b"t" if value else b"f"


# Python type -> (parameter type OID, text form). A str goes as `unknown` (OID 0), as
# psycopg sends it, so the server types it from its context; an int always as int8.
_PARAMETERS: dict[type, tuple[int, Callable[[Any], bytes]]] = {
    str: (0, _text),
    JsonText: (0, lambda value: value),
    int: (types["int8"].oid, _plain),
    float: (types["float8"].oid, _plain),
    Decimal: (types["numeric"].oid, _plain),
    UUID: (types["uuid"].oid, _plain),
    bool: (types["bool"].oid, _flag),
    datetime: (types["timestamptz"].oid, _iso),
    date: (types["date"].oid, _iso),
}


_INT8 = _PARAMETERS[int][0]


@lru_cache(maxsize=256)
def _numbered(sql: str) -> bytes:
    """`%s` placeholders as PostgreSQL's `$1`, `$2`, ... (`%%` is a literal `%`)."""
    counter = iter(range(1, 100_000))
    return re.sub(
        r"%[s%]", lambda m: "%" if m.group() == "%%" else f"${next(counter)}", sql
    ).encode()


def _check(result: pq.abc.PGresult, conn: psycopg.Connection) -> pq.abc.PGresult:
    if result.status in _OK:
        return result
    if conn.pgconn.status == pq.ConnStatus.BAD:
        raise psycopg.OperationalError(result.get_error_message(conn.info.encoding))
    raise errors.error_from_result(result, encoding=conn.info.encoding)


def _decoder(oid: int) -> Callable[[bytes], Any]:
    return _DECODERS.get(oid, bytes.decode)


# A result column's text by its type OID; anything else is returned as text.
_DECODERS: dict[int, Callable[[bytes], Any]] = {
    **{types[name].oid: int for name in ("int2", "int4", "int8")},
    types["bool"].oid: lambda raw: raw == b"t",
    types["json"].oid: orjson.loads,
    types["jsonb"].oid: orjson.loads,
    types["numeric"].oid: lambda raw: Decimal(raw.decode()),
}
