from django.db import migrations

# SEC-8: webhooks and mails leave the run cluster. 0009's once-a-minute schedule ran them
# inside a q2 worker that drives runs, where a silent mail server could push the task past
# q2's timeout and get the worker, and its runs, killed; `manage.py outbox` sends them now.
SCHEDULE = "agentruns.outbox"


def remove_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=SCHEDULE).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agentruns", "0013_shared_cache_table"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(remove_schedule, migrations.RunPython.noop)]
