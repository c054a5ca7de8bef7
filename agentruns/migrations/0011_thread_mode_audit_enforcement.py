from django.db import migrations


class Migration(migrations.Migration):
    """A thread's mode is read from its log (`mode.switched`, LOOP-3): the column that
    shadowed it goes. The audit row's enforcement column is named for what it holds."""

    dependencies = [
        ("agentruns", "0010_cancel_requested_by"),
    ]

    operations = [
        migrations.RenameField(model_name="gateaudit", old_name="mode", new_name="enforcement"),
        migrations.RemoveField(model_name="thread", name="mode"),
    ]
