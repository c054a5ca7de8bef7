from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations

# SEC-14: the database cache's table (settings CACHES without REDIS_URL), so throttle
# counters are shared by every web process from the first `migrate` on, tests included.
TABLE = "agentruns_cache"


def create(apps, schema_editor):
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, TABLE, dry_run=False)


def drop(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [
        ("agentruns", "0012_perf8_read_indexes"),
    ]

    operations = [migrations.RunPython(create, drop)]
