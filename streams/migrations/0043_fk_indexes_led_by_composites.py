"""The single-column indexes of foreign keys that a composite index (or unique constraint)
already leads with, dropped: `Stream.user` (`stream_user_created`), `Stream.project`
(`stream_project_created`) and 21 more. The composite serves every lookup, join and cascade by
the column alone (tests/streams/test_models.py checks each plan on SQLite and PostgreSQL);
the single-column copy only cost every insert and the disk.

Only the index goes: Django's own AlterField would remake each table on SQLite (a copy of the
stream table), so the state changes alone and the database drops the index it finds on that
one column (whatever its name); undone, Django's index is made again.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# (model, field): each foreign key whose own index goes
FIELDS = [
    ("auditentry", "project"),
    ("channel", "project"),
    ("dataset", "project"),
    ("datasetitem", "version"),
    ("datasetversion", "dataset"),
    ("delivery", "channel"),
    ("evaluation", "evaluator"),
    ("evaluation", "rule"),
    ("evaluator", "project"),
    ("firing", "project"),
    ("firing", "rule"),
    ("importjob", "user"),
    ("invitation", "project"),
    ("membership", "project"),
    ("membership", "user"),
    ("run", "experiment"),
    ("runitem", "run"),
    ("score", "score_type"),
    ("score", "stream"),
    ("sharelink", "owner"),
    ("stream", "project"),
    ("stream", "user"),
    ("variant", "experiment"),
]


def _single_column_indexes(schema_editor, table, column):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [
        name
        for name, c in constraints.items()
        if c["index"]
        and not c["unique"]
        and not c["primary_key"]
        and c["columns"] == [column]
        and not c.get("foreign_key")
    ]


def drop(apps, schema_editor):
    for model_name, field_name in FIELDS:
        model = apps.get_model("streams", model_name)
        column = model._meta.get_field(field_name).column
        for name in _single_column_indexes(schema_editor, model._meta.db_table, column):
            schema_editor.execute(schema_editor._delete_index_sql(model, name))


def make_again(apps, schema_editor):
    for model_name, field_name in FIELDS:
        model = apps.get_model("streams", model_name)
        field = model._meta.get_field(field_name)
        if not _single_column_indexes(schema_editor, model._meta.db_table, field.column):
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0042_pruned_days"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(drop, make_again)],
            state_operations=[
                migrations.AlterField(
                    model_name="auditentry",
                    name="project",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="audit_entries",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="channel",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notify_channels",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="dataset",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="datasets",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="datasetitem",
                    name="version",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="items",
                        to="streams.datasetversion",
                        verbose_name="version",
                    ),
                ),
                migrations.AlterField(
                    model_name="datasetversion",
                    name="dataset",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="versions",
                        to="streams.dataset",
                        verbose_name="dataset",
                    ),
                ),
                migrations.AlterField(
                    model_name="delivery",
                    name="channel",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="streams.channel",
                        verbose_name="channel",
                    ),
                ),
                migrations.AlterField(
                    model_name="evaluation",
                    name="evaluator",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evaluations",
                        to="streams.evaluator",
                        verbose_name="evaluator",
                    ),
                ),
                migrations.AlterField(
                    model_name="evaluation",
                    name="rule",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="evaluations",
                        to="streams.onlinerule",
                        verbose_name="online rule",
                    ),
                ),
                migrations.AlterField(
                    model_name="evaluator",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evaluators",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="firing",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="firing",
                    name="rule",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="firings",
                        to="streams.rule",
                    ),
                ),
                migrations.AlterField(
                    model_name="importjob",
                    name="user",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="user",
                    ),
                ),
                migrations.AlterField(
                    model_name="invitation",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="invitations",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="membership",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="membership",
                    name="user",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="user",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="experiment",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="streams.experiment",
                        verbose_name="experiment",
                    ),
                ),
                migrations.AlterField(
                    model_name="runitem",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="items",
                        to="streams.run",
                        verbose_name="run",
                    ),
                ),
                migrations.AlterField(
                    model_name="score",
                    name="score_type",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="scores",
                        to="streams.scoretype",
                        verbose_name="score type",
                    ),
                ),
                migrations.AlterField(
                    model_name="score",
                    name="stream",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="scores",
                        to="streams.stream",
                        verbose_name="stream",
                    ),
                ),
                migrations.AlterField(
                    model_name="sharelink",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="owner",
                    ),
                ),
                migrations.AlterField(
                    model_name="stream",
                    name="project",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="streams",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
                migrations.AlterField(
                    model_name="stream",
                    name="user",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="user",
                    ),
                ),
                migrations.AlterField(
                    model_name="variant",
                    name="experiment",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="variants",
                        to="streams.experiment",
                        verbose_name="experiment",
                    ),
                ),
            ],
        ),
    ]
