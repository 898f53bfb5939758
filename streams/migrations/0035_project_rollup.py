"""The project rollup (streams/models.py `ProjectRollup`): streams, usage and spend per period,
tag and project alone. Filled from the usage rollup's rows, whose sums over the dimensions it
leaves out are its rows exactly (both are kept by the same contributions: what
`rebuild_aggregates` would write, without reading a stream; the usage rollup also holds the
history retention deleted)."""

from django.db import migrations, models

VALUES = (
    "n", "usage_n", "estimated_n", "input_tokens", "output_tokens", "cached_input_tokens",
    "reasoning_tokens", "priced_n", "cost_eur_nanos", "cost_usd_nanos",
)  # fmt: skip
KEY = ("span", "tag", "project_key", "t")


def fill(apps, schema_editor):
    qn = schema_editor.connection.ops.quote_name
    usage = qn(apps.get_model("streams", "UsageRollup")._meta.db_table)
    project = qn(apps.get_model("streams", "ProjectRollup")._meta.db_table)
    key = ", ".join(qn(c) for c in KEY)
    sums = ", ".join(f"CAST(SUM({qn(v)}) AS BIGINT)" for v in VALUES)
    schema_editor.execute(
        f"INSERT INTO {project} ({key}, {', '.join(qn(v) for v in VALUES)}) "
        f"SELECT {key}, {sums} FROM {usage} GROUP BY {key}"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0033_event_blocks"),
    ]

    operations = [
        migrations.CreateModel(
            name="ProjectRollup",
            fields=[
                ("span", models.IntegerField(verbose_name="period length (s)")),
                ("tag", models.CharField(max_length=64, verbose_name="tag")),
                ("project_key", models.BigIntegerField(verbose_name="project key")),
                ("t", models.BigIntegerField(verbose_name="period start (epoch s)")),
                ("n", models.BigIntegerField(default=0, verbose_name="count")),
                ("usage_n", models.BigIntegerField(default=0, verbose_name="streams with usage")),
                (
                    "estimated_n",
                    models.BigIntegerField(default=0, verbose_name="streams with estimated usage"),
                ),
                ("input_tokens", models.BigIntegerField(default=0, verbose_name="input tokens")),
                ("output_tokens", models.BigIntegerField(default=0, verbose_name="output tokens")),
                (
                    "cached_input_tokens",
                    models.BigIntegerField(default=0, verbose_name="cached input tokens"),
                ),
                (
                    "reasoning_tokens",
                    models.BigIntegerField(default=0, verbose_name="reasoning tokens"),
                ),
                ("priced_n", models.BigIntegerField(default=0, verbose_name="streams with a cost")),
                (
                    "cost_eur_nanos",
                    models.BigIntegerField(default=0, verbose_name="cost in EUR (nano-units)"),
                ),
                (
                    "cost_usd_nanos",
                    models.BigIntegerField(default=0, verbose_name="cost in USD (nano-units)"),
                ),
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "span",
                        "tag",
                        "project_key",
                        "t",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
            ],
            options={
                "verbose_name": "project rollup",
                "verbose_name_plural": "project rollups",
            },
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=False),
    ]
