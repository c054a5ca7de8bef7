from django.db import migrations


def create_row(apps, schema_editor):
    apps.get_model("agentruns", "CatalogGeneration").objects.get_or_create(pk=1)


class Migration(migrations.Migration):
    dependencies = [("agentruns", "0001_initial")]
    operations = [migrations.RunPython(create_row, migrations.RunPython.noop)]
