"""Issue 49: the event blocks partitioned by day on PostgreSQL, the due streams by a flag.

`EventBlock.stream_created_at` (the stream's `created_at`, copied) is the partition key. On
PostgreSQL the table is made again as `PARTITION BY RANGE (stream_created_at)`: a partition a
UTC day for every day that has blocks or streams not yet packed, today's and the next three,
and a default one (streams/store/partitions.py makes the later days). A partitioned table's
primary key and unique constraints must hold its partition key: the key is (id,
stream_created_at) and `event_block_stream_first` is (stream_id, first, stream_created_at)
there (a stream has one creation, so it is as unique as the model says). SQLite keeps its
table.

`Stream.events_packed_at`: streams that ended and have no event rows (already packed, none
recorded, pruned) are marked now, so the sweep's partial index holds only what is left to pack.
"""

from django.db import migrations, models

TABLE = "streams_eventblock"
AHEAD_DAYS = 3


def _days(cursor):
    cursor.execute(
        f"SELECT DISTINCT (stream_created_at AT TIME ZONE 'UTC')::date FROM {TABLE} "
        "UNION SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM streams_stream "
        "WHERE events_packed_at IS NULL "
        f"UNION SELECT (now() AT TIME ZONE 'UTC')::date + n FROM generate_series(0, {AHEAD_DAYS}) n"
    )
    return sorted(day for (day,) in cursor.fetchall())


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        days = _days(cursor)
        cursor.execute(
            f"CREATE TABLE {TABLE}_new (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING IDENTITY "
            "INCLUDING CONSTRAINTS) PARTITION BY RANGE (stream_created_at)"
        )
        cursor.execute(f"ALTER TABLE {TABLE}_new ADD PRIMARY KEY (id, stream_created_at)")
        cursor.execute(f"CREATE TABLE {TABLE}_default PARTITION OF {TABLE}_new DEFAULT")
        for day in days:
            cursor.execute(
                f"CREATE TABLE {TABLE}_p{day:%Y%m%d} PARTITION OF {TABLE}_new "
                "FOR VALUES FROM (%s::date::timestamp AT TIME ZONE 'UTC') "
                "TO ((%s::date + 1)::timestamp AT TIME ZONE 'UTC')",
                [day, day],
            )
        cursor.execute(f"INSERT INTO {TABLE}_new OVERRIDING SYSTEM VALUE SELECT * FROM {TABLE}")
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{TABLE}_new', 'id'), "
            f"coalesce((SELECT max(id) FROM {TABLE}_new), 0) + 1, false)"
        )
        cursor.execute(f"DROP TABLE {TABLE}")
        cursor.execute(f"ALTER TABLE {TABLE}_new RENAME TO {TABLE}")
        cursor.execute(f"ALTER INDEX {TABLE}_new_pkey RENAME TO {TABLE}_pkey")
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT event_block_stream_first "
            "UNIQUE (stream_id, first, stream_created_at)"
        )
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_stream_id_fk_streams_stream_id "
            "FOREIGN KEY (stream_id) REFERENCES streams_stream (id) DEFERRABLE INITIALLY DEFERRED"
        )


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {TABLE}_old (LIKE {TABLE} INCLUDING DEFAULTS INCLUDING IDENTITY "
            "INCLUDING CONSTRAINTS)"
        )
        cursor.execute(f"INSERT INTO {TABLE}_old OVERRIDING SYSTEM VALUE SELECT * FROM {TABLE}")
        cursor.execute(
            f"SELECT setval(pg_get_serial_sequence('{TABLE}_old', 'id'), "
            f"coalesce((SELECT max(id) FROM {TABLE}_old), 0) + 1, false)"
        )
        cursor.execute(f"DROP TABLE {TABLE}")  # (and its partitions)
        cursor.execute(f"ALTER TABLE {TABLE}_old RENAME TO {TABLE}")
        cursor.execute(f"ALTER TABLE {TABLE} ADD PRIMARY KEY (id)")
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT event_block_stream_first UNIQUE (stream_id, first)"
        )
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_stream_id_fk_streams_stream_id "
            "FOREIGN KEY (stream_id) REFERENCES streams_stream (id) DEFERRABLE INITIALLY DEFERRED"
        )


MARK_PACKED = """
UPDATE streams_stream SET events_packed_at = CURRENT_TIMESTAMP
WHERE status NOT IN ('pending', 'streaming')
AND NOT EXISTS (SELECT 1 FROM streams_event e WHERE e.stream_id = streams_stream.id)
"""

FILL_CREATED = """
UPDATE streams_eventblock SET stream_created_at = (
    SELECT s.created_at FROM streams_stream s WHERE s.id = streams_eventblock.stream_id
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("streams", "0039_rollup_format"),
    ]

    operations = [
        migrations.AddField(
            model_name="stream",
            name="events_packed_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="events packed at"),
        ),
        migrations.RunSQL(MARK_PACKED, migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="stream",
            index=models.Index(
                condition=models.Q(("events_packed_at__isnull", True)),
                fields=["id"],
                name="stream_unpacked",
            ),
        ),
        migrations.AddField(
            model_name="eventblock",
            name="stream_created_at",
            field=models.DateTimeField(null=True, verbose_name="stream created at"),
        ),
        migrations.RunSQL(FILL_CREATED, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="eventblock",
            name="stream_created_at",
            field=models.DateTimeField(verbose_name="stream created at"),
        ),
        migrations.RunPython(partition, unpartition),
    ]
