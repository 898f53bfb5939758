"""Pre-aggregates of finished streams (streams/store/aggregates.py), the indexes of admin analytics'
largest and slowest streams, and `Stream.events_pruned_at` (retention)."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0005_imports"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="FindingRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("span", models.IntegerField()),
                ("t", models.BigIntegerField()),
                ("code", models.CharField(max_length=50)),
                ("severity", models.CharField(max_length=10)),
                ("resolved_model", models.CharField(max_length=100)),
                ("requested_model", models.CharField(max_length=100)),
                ("source", models.CharField(max_length=10)),
                ("user_key", models.BigIntegerField()),
                ("n", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="HistogramRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("metric", models.SmallIntegerField()),
                ("full", models.BooleanField()),
                ("span", models.IntegerField()),
                ("t", models.BigIntegerField()),
                ("resolved_model", models.CharField(max_length=100)),
                ("requested_model", models.CharField(max_length=100)),
                ("source", models.CharField(max_length=10)),
                ("user_key", models.BigIntegerField()),
                ("bucket", models.SmallIntegerField()),
                ("n", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="RoutingRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("span", models.IntegerField()),
                ("t", models.BigIntegerField()),
                ("resolved_model", models.CharField(max_length=100)),
                ("source", models.CharField(max_length=10)),
                ("user_key", models.BigIntegerField()),
                ("routing_category", models.CharField(max_length=50)),
                ("routing_source", models.CharField(max_length=50)),
                ("n", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="UsageRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("span", models.IntegerField()),
                ("t", models.BigIntegerField()),
                ("resolved_model", models.CharField(max_length=100)),
                ("requested_model", models.CharField(max_length=100)),
                ("source", models.CharField(max_length=10)),
                ("user_key", models.BigIntegerField()),
                ("status", models.CharField(max_length=12)),
                ("error_code", models.CharField(max_length=100)),
                ("n", models.BigIntegerField(default=0)),
                ("ttft_n", models.BigIntegerField(default=0)),
                ("ttft_sum_ns", models.BigIntegerField(default=0)),
                ("itl_n", models.BigIntegerField(default=0)),
                ("itl_sum_ns", models.BigIntegerField(default=0)),
                ("routed", models.BigIntegerField(default=0)),
                ("decision_n", models.BigIntegerField(default=0)),
                ("phase_n", models.BigIntegerField(default=0)),
                ("written_sum_us", models.BigIntegerField(default=0)),
                ("headers_sum_us", models.BigIntegerField(default=0)),
                ("created_sum_us", models.BigIntegerField(default=0)),
                ("routed_or_created_sum_us", models.BigIntegerField(default=0)),
                ("first_token_sum_us", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("bytes_received", models.BigIntegerField(default=0)),
                ("events", models.BigIntegerField(default=0)),
                ("findings", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name="stream",
            name="events_pruned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=["bytes_received", "created_at", "user"], name="stream_bytes_top"
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=["duration_ms", "created_at", "user"], name="stream_duration_top"
            ),
        ),
        migrations.AddConstraint(
            model_name="findingrollup",
            constraint=models.UniqueConstraint(
                fields=(
                    "span",
                    "t",
                    "code",
                    "severity",
                    "resolved_model",
                    "requested_model",
                    "source",
                    "user_key",
                ),
                name="finding_rollup_key",
            ),
        ),
        migrations.AddConstraint(
            model_name="histogramrollup",
            constraint=models.UniqueConstraint(
                fields=(
                    "metric",
                    "full",
                    "span",
                    "t",
                    "user_key",
                    "source",
                    "resolved_model",
                    "requested_model",
                    "bucket",
                ),
                name="histogram_rollup_key",
            ),
        ),
        migrations.AddConstraint(
            model_name="routingrollup",
            constraint=models.UniqueConstraint(
                fields=(
                    "span",
                    "t",
                    "resolved_model",
                    "source",
                    "user_key",
                    "routing_category",
                    "routing_source",
                ),
                name="routing_rollup_key",
            ),
        ),
        migrations.AddConstraint(
            model_name="usagerollup",
            constraint=models.UniqueConstraint(
                fields=(
                    "span",
                    "t",
                    "resolved_model",
                    "requested_model",
                    "source",
                    "user_key",
                    "status",
                    "error_code",
                ),
                name="usage_rollup_key",
            ),
        ),
    ]
