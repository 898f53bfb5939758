"""Usage and cost (streams/core/usage.py, streams/store/prices.py): `output_tokens` was a
count of output deltas and is now called so (`output_deltas`); `output_tokens` and the other
token columns are the usage the upstream reported, or an estimate (`usage_source`); `cost_*`
the cost at the price valid at the stream's start; `Price` a team's own prices. Rows stored
before have no usage and no cost until `manage.py reprice` gives them theirs."""

from django.conf import settings
from django.db import migrations, models

_ADDED = [
    (
        "stream",
        "output_tokens",
        models.BigIntegerField(blank=True, null=True, verbose_name="output tokens"),
    ),
    (
        "usagerollup",
        "output_tokens",
        models.BigIntegerField(default=0, verbose_name="output tokens"),
    ),
    (
        "stream",
        "cached_input_tokens",
        models.BigIntegerField(blank=True, null=True, verbose_name="cached input tokens"),
    ),
    (
        "stream",
        "cost_currency",
        models.CharField(blank=True, max_length=3, verbose_name="cost currency"),
    ),
    (
        "stream",
        "cost_nanos",
        models.BigIntegerField(blank=True, null=True, verbose_name="cost (nano-units)"),
    ),
    (
        "stream",
        "input_tokens",
        models.BigIntegerField(blank=True, null=True, verbose_name="input tokens"),
    ),
    (
        "stream",
        "price_ref",
        models.CharField(blank=True, max_length=200, verbose_name="price used"),
    ),
    (
        "stream",
        "reasoning_tokens",
        models.BigIntegerField(blank=True, null=True, verbose_name="reasoning tokens"),
    ),
    (
        "stream",
        "total_tokens",
        models.BigIntegerField(blank=True, null=True, verbose_name="total tokens"),
    ),
    (
        "stream",
        "usage_source",
        models.CharField(
            blank=True,
            choices=[("reported", "Reported"), ("estimated", "Estimated")],
            max_length=10,
            verbose_name="usage source",
        ),
    ),
    (
        "usagerollup",
        "cached_input_tokens",
        models.BigIntegerField(default=0, verbose_name="cached input tokens"),
    ),
    (
        "usagerollup",
        "cost_eur_nanos",
        models.BigIntegerField(default=0, verbose_name="cost in EUR (nano-units)"),
    ),
    (
        "usagerollup",
        "cost_usd_nanos",
        models.BigIntegerField(default=0, verbose_name="cost in USD (nano-units)"),
    ),
    (
        "usagerollup",
        "estimated_n",
        models.BigIntegerField(default=0, verbose_name="streams with estimated usage"),
    ),
    ("usagerollup", "input_tokens", models.BigIntegerField(default=0, verbose_name="input tokens")),
    (
        "usagerollup",
        "priced_n",
        models.BigIntegerField(default=0, verbose_name="streams with a cost"),
    ),
    (
        "usagerollup",
        "reasoning_tokens",
        models.BigIntegerField(default=0, verbose_name="reasoning tokens"),
    ),
    (
        "usagerollup",
        "usage_n",
        models.BigIntegerField(default=0, verbose_name="streams with usage"),
    ),
]


def _add_columns(apps, schema_editor):
    """The new columns, each added in place: SQLite's ALTER TABLE ADD COLUMN with the
    default kept in the table (Django would copy the whole table once per NOT NULL column,
    twelve times here, minutes on a million streams), PostgreSQL's as Django adds them."""
    for model_name, name, field in _ADDED:
        model = apps.get_model("streams", model_name)
        field = field.clone()
        field.set_attributes_from_name(name)
        field.model = model
        if schema_editor.connection.vendor != "sqlite":
            schema_editor.add_field(model, field)
            continue
        sql, params = schema_editor.column_sql(model, field, include_default=True)
        sql = sql % tuple(schema_editor.quote_value(p) for p in params)
        table = schema_editor.quote_name(model._meta.db_table)
        schema_editor.execute(
            f"ALTER TABLE {table} ADD COLUMN {schema_editor.quote_name(field.column)} {sql}"
        )


def _drop_columns(apps, schema_editor):
    for model_name, name, field in reversed(_ADDED):
        model = apps.get_model("streams", model_name)
        field = field.clone()
        field.set_attributes_from_name(name)
        field.model = model
        schema_editor.remove_field(model, field)


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0011_verbose_names"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RenameField(
            model_name="stream", old_name="output_tokens", new_name="output_deltas"
        ),
        migrations.AlterField(
            model_name="stream",
            name="output_deltas",
            field=models.PositiveIntegerField(default=0, verbose_name="output deltas"),
        ),
        migrations.RenameField(
            model_name="usagerollup", old_name="output_tokens", new_name="output_deltas"
        ),
        migrations.AlterField(
            model_name="usagerollup",
            name="output_deltas",
            field=models.BigIntegerField(default=0, verbose_name="output deltas"),
        ),
        # the column's rename carries its index along (both databases): only the state moves
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="stream", name="stream_user_usage"),
                migrations.AddIndex(
                    model_name="stream",
                    index=models.Index(
                        fields=[
                            "user",
                            "created_at",
                            "status",
                            "resolved_model",
                            "output_deltas",
                            "bytes_received",
                            "duration_ms",
                            "findings_count",
                        ],
                        name="stream_user_usage",
                    ),
                ),
            ]
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(model_name=model_name, name=name, field=field)
                for model_name, name, field in _ADDED
            ],
            database_operations=[migrations.RunPython(_add_columns, _drop_columns)],
        ),
        migrations.CreateModel(
            name="Price",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "model_pattern",
                    models.CharField(
                        help_text="A model id, or a pattern with * (gpt-4o*); case is ignored.",
                        max_length=100,
                        verbose_name="model pattern",
                    ),
                ),
                (
                    "effective_from",
                    models.DateTimeField(
                        help_text="Streams that started from this moment on.",
                        verbose_name="effective from",
                    ),
                ),
                (
                    "currency",
                    models.CharField(
                        choices=[("EUR", "EUR"), ("USD", "USD")],
                        default="EUR",
                        max_length=3,
                        verbose_name="currency",
                    ),
                ),
                (
                    "input_per_million",
                    models.DecimalField(
                        decimal_places=6, max_digits=14, verbose_name="input per million"
                    ),
                ),
                (
                    "cached_input_per_million",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Empty: the input price.",
                        max_digits=14,
                        null=True,
                        verbose_name="cached input per million",
                    ),
                ),
                (
                    "output_per_million",
                    models.DecimalField(
                        decimal_places=6, max_digits=14, verbose_name="output per million"
                    ),
                ),
                (
                    "reasoning_per_million",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Empty: the output price.",
                        max_digits=14,
                        null=True,
                        verbose_name="reasoning per million",
                    ),
                ),
                ("note", models.CharField(blank=True, max_length=200, verbose_name="note")),
                ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
            ],
            options={
                "verbose_name": "price",
                "verbose_name_plural": "prices",
                "ordering": ["model_pattern", "-effective_from"],
            },
        ),
        migrations.AddConstraint(
            model_name="price",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("input_per_million__gte", 0),
                    ("output_per_million__gte", 0),
                    models.Q(
                        ("cached_input_per_million__isnull", True),
                        ("cached_input_per_million__gte", 0),
                        _connector="OR",
                    ),
                    models.Q(
                        ("reasoning_per_million__isnull", True),
                        ("reasoning_per_million__gte", 0),
                        _connector="OR",
                    ),
                ),
                name="price_not_negative",
            ),
        ),
        migrations.AddConstraint(
            model_name="price",
            constraint=models.UniqueConstraint(
                fields=("model_pattern", "effective_from"), name="price_one_per_start"
            ),
        ),
    ]
