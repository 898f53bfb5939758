"""Issue 49: the days whose partition of event blocks retention dropped (PostgreSQL), so a
day's retention marks no stream row (streams/store/retention.py, `pruned_at`)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0041_event_block_outline"),
    ]

    operations = [
        migrations.CreateModel(
            name="PrunedDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField(unique=True, verbose_name="day")),
                ("at", models.DateTimeField(verbose_name="events deleted at")),
            ],
            options={
                "verbose_name": "day of deleted events",
                "verbose_name_plural": "days of deleted events",
            },
        ),
    ]
