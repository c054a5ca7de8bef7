"""Load the demo catalog and a demo admin; safe to run again (updates in place)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from agentruns.demo import load_demo_data

DEMO_USER = "admin"
DEMO_PASSWORD = "agentruns-demo"


class Command(BaseCommand):
    help = "Create demo providers, configurations, snippets, skills and an admin user."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        load_demo_data()
        user, created = get_user_model().objects.get_or_create(
            username=DEMO_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        self.stdout.write(f"Demo data loaded. Admin login: {DEMO_USER} / {DEMO_PASSWORD}")
