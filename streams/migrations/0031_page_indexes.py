"""Indexes that lead with what a page filters on (docs/performance.md, "Pages at 1M"): the admin's
events of a type, through an index of every event but the output deltas (`event_sparse_type`);
a user's streams of one status (`stream_user_status`)."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0030_experiments"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(
                    models.Q(("type", "response.audio.transcript.delta"), _negated=True),
                    models.Q(("type", "response.code_interpreter_call_code.delta"), _negated=True),
                    models.Q(("type", "response.custom_tool_call_input.delta"), _negated=True),
                    models.Q(("type", "response.function_call_arguments.delta"), _negated=True),
                    models.Q(("type", "response.mcp_call_arguments.delta"), _negated=True),
                    models.Q(("type", "response.output_text.delta"), _negated=True),
                    models.Q(("type", "response.reasoning_summary_text.delta"), _negated=True),
                    models.Q(("type", "response.reasoning_text.delta"), _negated=True),
                    models.Q(("type", "response.refusal.delta"), _negated=True),
                ),
                fields=["type", "id"],
                name="event_sparse_type",
            ),
        ),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(fields=["user", "status", "-created_at"], name="stream_user_status"),
        ),
    ]
