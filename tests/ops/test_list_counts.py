"""PERF-8: a list's count is exact up to EXACT_COUNT_UP_TO and the planner's estimate
beyond, which only the store asks for (issue 46)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from agentruns import selectors

pytestmark = pytest.mark.django_db


@pytest.fixture
def users():
    User = get_user_model()
    User.objects.bulk_create([User(username=f"counted-{n}") for n in range(3)])
    return User.objects.filter(username__startswith="counted-")


def test_perf8_a_short_list_is_counted_exactly(users):
    assert selectors.bounded_count(users) == (3, True)


def test_perf8_a_long_list_shows_the_planners_estimate(users, monkeypatch):
    monkeypatch.setattr(selectors, "EXACT_COUNT_UP_TO", 1)
    count, exact = selectors.bounded_count(users)
    assert not exact
    assert count >= 2  # never less than the rows the bounded count already saw
