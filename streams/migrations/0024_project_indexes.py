"""The stream indexes the pages read by project lead with it or carry it (docs/teams.md,
"Analytics by project"): the list's (project, created_at); the project in the covering indexes
the analytics read in ttft or time order (checked in the index entry, never the table row);
the admin page's usage index in (project, user) order; the largest and slowest streams'."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0023_rollup_projects"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_resolved_ttft_cov",
        ),
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_requested_ttft_cov",
        ),
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_ttft_cov",
        ),
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_pair_metrics",
        ),
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_bytes_top",
        ),
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_duration_top",
        ),
        migrations.RemoveIndex(
            model_name="stream",
            name="stream_user_usage",
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(fields=["project", "-created_at"], name="stream_project_created"),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=[
                    "resolved_model",
                    "ttft_ms",
                    "created_at",
                    "requested_model",
                    "status",
                    "source",
                    "project",
                    "user",
                ],
                name="stream_resolved_ttft_cov",
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=[
                    "requested_model",
                    "ttft_ms",
                    "created_at",
                    "resolved_model",
                    "status",
                    "source",
                    "project",
                    "user",
                ],
                name="stream_requested_ttft_cov",
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=[
                    "ttft_ms",
                    "created_at",
                    "resolved_model",
                    "requested_model",
                    "status",
                    "source",
                    "project",
                    "user",
                ],
                name="stream_ttft_cov",
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=[
                    "resolved_model",
                    "requested_model",
                    "created_at",
                    "status",
                    "source",
                    "project",
                    "user",
                    "ttft_ms",
                    "inter_token_ms",
                    "tokens_per_s",
                    "request_written_us",
                    "headers_us",
                    "created_event_us",
                    "routing_us",
                    "first_token_us",
                    "routing_category",
                    "routing_source",
                ],
                name="stream_pair_metrics",
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=[
                    "project",
                    "user",
                    "created_at",
                    "status",
                    "resolved_model",
                    "output_deltas",
                    "bytes_received",
                    "duration_ms",
                    "findings_count",
                ],
                name="stream_project_usage",
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=["bytes_received", "created_at", "user", "project"], name="stream_bytes_top"
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=["duration_ms", "created_at", "user", "project"], name="stream_duration_top"
            ),
        ),
    ]
