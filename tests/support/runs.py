"""Submitting runs as the API would, and reaching the test database from other processes."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.db import connection

from agentruns.models import Run
from agentruns.services.runs import Submission, run_submit


def submit(user: Any, configuration: str, text: str = "go", **submission: Any) -> Run:
    """A new run through the service every entry point uses (asserts it was created)."""
    run, created = run_submit(
        user=user, submission=Submission(configuration=configuration, input=text, **submission)
    )
    assert created
    return run


def current_database_url() -> str:
    """The database this test runs against (pytest-django's test database), for children."""
    db = connection.settings_dict
    user = quote(db.get("USER") or "")
    password = db.get("PASSWORD") or ""
    auth = f"{user}:{quote(password)}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or "5432"
    return f"postgres://{auth}{host}:{port}/{db['NAME']}"
