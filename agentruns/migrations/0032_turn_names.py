"""Issue 46: one name per meaning. A *step* is a durable write; the model turn a call came
from is its `turn_index` (the log's payload still stores it as "step") and a run's count of
model turns is `turns`. Renaming a column carries its index along on PostgreSQL and SQLite,
so `invocation_call` changes only in the migration state: no index is rebuilt."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentruns", "0031_del_sibling_tickets"),
    ]

    operations = [
        migrations.RenameField(model_name="run", old_name="steps", new_name="turns"),
        migrations.RenameField(model_name="toolinvocation", old_name="step", new_name="turn_index"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="toolinvocation", name="invocation_call"),
                migrations.AddIndex(
                    model_name="toolinvocation",
                    index=models.Index(
                        fields=["run", "turn_index", "call_id"], name="invocation_call"
                    ),
                ),
            ],
        ),
    ]
