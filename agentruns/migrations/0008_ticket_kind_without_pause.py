from django.db import migrations, models


class Migration(migrations.Migration):
    """No code opens a pause ticket: the kind leaves the choices."""

    dependencies = [
        ("agentruns", "0007_log_without_fk_checks"),
    ]

    operations = [
        migrations.AlterField(
            model_name="ticket",
            name="kind",
            field=models.CharField(
                choices=[("tool_permission", "Tool Permission"), ("remote_input", "Remote Input")],
                max_length=20,
            ),
        ),
    ]
