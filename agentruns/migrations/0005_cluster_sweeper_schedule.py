"""CLU-3, HITL-7: the sweeper as a django-q2 schedule, once a minute. (Workers also sweep
on their heartbeat, every lease/3; the schedule is the floor, not the only path.)"""

from django.db import migrations
from django.utils import timezone

NAME = "agentruns.sweeper"
FUNC = "agentruns.cluster.tasks.sweep"


def create(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name=NAME,
        defaults={
            "func": FUNC,
            "schedule_type": "I",  # Schedule.MINUTES
            "minutes": 1,
            "repeats": -1,
            "next_run": timezone.now(),
        },
    )


def remove(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agentruns", "0004_modes_as_list"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create, remove)]
