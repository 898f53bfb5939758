from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("streams", "0003_proxy")]

    operations = [
        migrations.AddField(
            model_name="stream",
            name="receipt_clock",
            field=models.CharField(
                blank=True,
                choices=[("kernel", "kernel"), ("loop", "event loop")],
                max_length=10,
            ),
        ),
    ]
