"""A stream's format (issue 48, streams/core/formats/): the API its bytes speak, `responses` for
every stream before it. SQLite remakes the stream table to add a column with a default: the
search index's view and triggers over it go first and come back after, as 0018 does."""

import importlib

from django.db import migrations, models

_projects = importlib.import_module("streams.migrations.0018_projects")
_search_index_on, _search_index_off = _projects._search_index_on, _projects._search_index_off


class Migration(migrations.Migration):

    dependencies = [
        ("streams", "0031_page_indexes"),
    ]

    operations = [
        migrations.RunPython(_search_index_off, _search_index_on),
        migrations.AddField(
            model_name="stream",
            name="format",
            field=models.CharField(
                choices=[
                    ("responses", "Responses"),
                    ("chat", "Chat Completions"),
                    ("messages", "Anthropic Messages"),
                ],
                default="responses",
                max_length=10,
                verbose_name="format",
            ),
        ),
        migrations.RunPython(_search_index_on, _search_index_off),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                fields=["project", "format", "-created_at"], name="stream_project_format"
            ),
        ),
    ]
