from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("streams", "0004_clock")]

    operations = []
