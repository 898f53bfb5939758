"""Stream.warning_findings: a stream's warnings counted apart from its info findings, so lists
and filters can show severity (info grey, warning orange, error red). Existing rows are counted
from their stored findings, in one statement (rows whose findings retention deleted keep 0)."""

from django.db import migrations, models

BACKFILL = """
UPDATE streams_stream SET warning_findings = (
    SELECT COUNT(*) FROM streams_finding
    WHERE streams_finding.stream_id = streams_stream.id AND streams_finding.severity = 'warning'
)
WHERE findings_count > error_findings
"""


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0009_sealed_secrets"),
    ]

    operations = [
        migrations.AddField(
            model_name="stream",
            name="warning_findings",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
