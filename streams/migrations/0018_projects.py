"""Projects (docs/teams.md). Every user gets a personal project, with them as its owner, holding
their streams, tokens, imports and share links: nothing changes for a user who never joins a
team. Streams without a user stay without a project (only staff saw them, and still do); score
types and prices stay the instance's (no project). The code is frozen here as it was written:
later changes to the models cannot change what this migration does."""

import importlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _slugify(text):
    import re
    import unicodedata

    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text.lower())
    return re.sub(r"[-\s]+", "-", text).strip("-_")


def personal_projects(apps, schema_editor):
    User = apps.get_model(settings.AUTH_USER_MODEL)
    Project = apps.get_model("streams", "Project")
    Membership = apps.get_model("streams", "Membership")
    names, slugs = set(), set()
    for user in User.objects.order_by("pk").iterator():
        base = (user.username or f"user {user.pk}")[:92]
        slug_base = (_slugify(base) or "user")[:40]
        n = 1
        while True:
            name = base + ("" if n == 1 else f" ({n})")
            slug = slug_base + ("" if n == 1 else f"-{n}")
            if name not in names and slug not in slugs:
                break
            n += 1
        names.add(name)
        slugs.add(slug)
        project = Project.objects.create(name=name, slug=slug, personal_of=user)
        Membership.objects.create(project=project, user=user, role="owner")
    project_table = Project._meta.db_table
    quote = schema_editor.connection.ops.quote_name
    for model, column in (
        ("Stream", "user_id"),
        ("ApiToken", "user_id"),
        ("ImportJob", "user_id"),
        ("ShareLink", "owner_id"),
    ):
        table = quote(apps.get_model("streams", model)._meta.db_table)
        schema_editor.execute(
            f"UPDATE {table} SET {quote('project_id')} = (SELECT p.{quote('id')} "
            f"FROM {quote(project_table)} p WHERE p.{quote('personal_of_id')} = "
            f"{table}.{quote(column)}) WHERE {quote(column)} IS NOT NULL"
        )


def _search_index(apps, schema_editor, on):
    """SQLite remakes the stream table to drop `project` (going back): the search index's view
    and triggers over it (0015's, as they were) go first and come back after."""
    if schema_editor.connection.vendor != "sqlite":
        return
    made = importlib.import_module("streams.migrations.0015_search_redacted")
    for statement in made.SQLITE if on else made.SQLITE_DROP:
        schema_editor.execute(statement)


def _search_index_on(apps, schema_editor):
    _search_index(apps, schema_editor, on=True)


def _search_index_off(apps, schema_editor):
    _search_index(apps, schema_editor, on=False)


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0017_source_labels"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="scoretype",
            name="name",
            field=models.SlugField(verbose_name="name"),
        ),
        migrations.CreateModel(
            name="Project",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100, unique=True, verbose_name="name")),
                ("slug", models.SlugField(max_length=60, unique=True, verbose_name="slug")),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                (
                    "personal_of",
                    models.OneToOneField(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="personal_project",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="personal project of",
                    ),
                ),
            ],
            options={
                "verbose_name": "project",
                "verbose_name_plural": "projects",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("viewer", "Viewer"),
                            ("member", "Member"),
                            ("admin", "Admin"),
                            ("owner", "Owner"),
                        ],
                        max_length=10,
                        verbose_name="role",
                    ),
                ),
                (
                    "origin",
                    models.CharField(
                        choices=[("hand", "Added by hand"), ("idp", "Identity provider")],
                        default="hand",
                        max_length=10,
                        verbose_name="origin",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                (
                    "last_used_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="last used at"),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="user",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="streams.project",
                        verbose_name="project",
                    ),
                ),
            ],
            options={
                "verbose_name": "membership",
                "verbose_name_plural": "memberships",
            },
        ),
        migrations.AddField(
            model_name="apitoken",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tokens",
                to="streams.project",
                verbose_name="project",
            ),
        ),
        migrations.AddField(
            model_name="importjob",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="import_jobs",
                to="streams.project",
                verbose_name="project",
            ),
        ),
        migrations.AddField(
            model_name="price",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="prices",
                to="streams.project",
                verbose_name="project",
            ),
        ),
        migrations.AddField(
            model_name="scoretype",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="score_types",
                to="streams.project",
                verbose_name="project",
            ),
        ),
        migrations.AddField(
            model_name="sharelink",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="share_links",
                to="streams.project",
                verbose_name="project",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, _search_index_on),
        migrations.AddField(
            model_name="stream",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="streams",
                to="streams.project",
                verbose_name="project",
            ),
        ),
        migrations.RunPython(migrations.RunPython.noop, _search_index_off),
        migrations.AddConstraint(
            model_name="scoretype",
            constraint=models.UniqueConstraint(
                fields=("project", "name"), name="score_type_project_name", nulls_distinct=False
            ),
        ),
        migrations.AddIndex(
            model_name="membership",
            index=models.Index(fields=["user", "-last_used_at"], name="membership_user_used"),
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.UniqueConstraint(
                fields=("project", "user"), name="membership_unique"
            ),
        ),
        migrations.RunPython(personal_projects, migrations.RunPython.noop, elidable=False),
    ]
