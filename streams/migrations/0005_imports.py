"""Import jobs: uploads parsed in the background (streams/ingest/import_jobs.py)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

STATUSES = [
    ("queued", "Queued"),
    ("running", "Running"),
    ("done", "Done"),
    ("failed", "Failed"),
    ("cancelled", "Cancelled"),
]
FILE_STATUSES = [
    ("queued", "Queued"),
    ("reading", "Reading"),
    ("done", "Done"),
    ("failed", "Failed"),
    ("cancelled", "Cancelled"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0004_clock"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ImportJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("status", models.CharField(choices=STATUSES, default="queued", max_length=20)),
                ("model", models.CharField(blank=True, max_length=100)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("polled_at", models.DateTimeField(auto_now_add=True)),
                ("cancel_reason", models.CharField(blank=True, max_length=100)),
                ("error", models.TextField(blank=True)),
                ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                           to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.CreateModel(
            name="ImportFile",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("position", models.PositiveIntegerField()),
                ("filename", models.CharField(max_length=300)),
                ("size", models.PositiveBigIntegerField()),
                ("content", models.BinaryField()),
                ("status", models.CharField(choices=FILE_STATUSES, default="queued",
                                            max_length=20)),
                ("error", models.TextField(blank=True)),
                ("stream_ids", models.JSONField(default=list)),
                ("job", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                          related_name="files", to="streams.importjob")),
            ],
            options={"ordering": ["job", "position"]},
        ),
        migrations.AddIndex(
            model_name="importjob",
            index=models.Index(fields=["user", "status"], name="importjob_user_status"),
        ),
        migrations.AddIndex(
            model_name="importjob",
            index=models.Index(fields=["user", "created_at"], name="importjob_user_created"),
        ),
    ]  # fmt: skip
