from django.db import migrations, models


class Migration(migrations.Migration):
    """PERF-8: what a year of history needs to be read fast. The run list pages newest
    first without sorting a million runs; the audit export and the inbox find their few
    rows by partial indexes the loop's steps never write to. (On a large live database,
    create them first with CREATE INDEX CONCURRENTLY under these names.)"""

    dependencies = [
        ("agentruns", "0011_thread_mode_audit_enforcement"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("type__in", ("ticket.decided", "secret.redacted", "run.cancelled"))),
                fields=["created_at", "id"],
                name="event_audit_time",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["created_at", "id"], name="run_newest"),
        ),
        migrations.AddIndex(
            model_name="toolinvocation",
            index=models.Index(
                condition=models.Q(("status", "uncertain")),
                fields=["-effect_sent_at"],
                name="invocation_uncertain",
            ),
        ),
    ]
