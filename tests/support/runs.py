"""Runs for tests: submitted as every entry point submits them (`submit`), one or many,
driven to where a test needs them, and the test database other processes reach."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from agentruns.models import Configuration, Run
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit


def submit(user: Any, configuration: str, text: str = "go", **submission: Any) -> Run:
    """A new run through the service every entry point uses (asserts it was created)."""
    run, created = run_submit(
        user=user, submission=Submission(configuration=configuration, input=text, **submission)
    )
    assert created
    return run


def park(user: Any, configuration: str, text: str = "go", **submission: Any) -> Run:
    run = submit(user, configuration, text, **submission)
    assert execute_run(run.pk) == "awaiting"
    run.refresh_from_db()
    return run


def prompt(user: Any, configuration: str, text: str = "go", expect: str = "completed", **kw):
    run = submit(user, configuration, text, **kw)
    outcome = execute_run(run.pk)
    assert outcome == expect, (outcome, Run.objects.get(pk=run.pk).failure)
    run.refresh_from_db()
    return run


def bench_user() -> Any:
    user, _ = get_user_model().objects.get_or_create(
        username="cluster-tester", defaults={"is_staff": True, "is_superuser": True}
    )
    return user


def submit_batch(config: Configuration, n: int = 1, text: str = "go") -> list[Run]:
    """`n` runs of one configuration by the cluster tests' user, none executed."""
    user = bench_user()
    return [submit(user, config.slug, text) for _ in range(n)]
