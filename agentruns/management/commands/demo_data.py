"""Load the demo catalog and the demo users; safe to run again (updates in place)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from agentruns.demo import (
    load_demo_data,
    load_demo_governance,
    load_demo_schedules,
    load_demo_users,
)
from agentruns.demo_accounts import DEMO_PASSWORD, DEMO_USERS


class Command(BaseCommand):
    help = (
        "Create demo providers, configurations, snippets, skills, the demo users, an "
        "inactive schedule and a trigger."
    )

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        load_demo_data()
        load_demo_users()
        load_demo_schedules()
        load_demo_governance()
        names = ", ".join(username for username, _, _ in DEMO_USERS)
        self.stdout.write(f"Demo data loaded. Sign in as {names}, password {DEMO_PASSWORD}")
