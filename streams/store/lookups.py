"""A stream's tags (`Stream.tags`, a JSON list of strings) holding a tag, on SQLite and PostgreSQL;
the distinct values of an indexed column of streams (`distinct_stream_values`); and the events
of a type (`events_of_type`).

Django 5.2's `tags__contains=[tag]` is PostgreSQL's `@>` and raises NotSupportedError on SQLite
(`supports_json_field_contains = False`), and a text match on the encoded list (`icontains`)
would be wrong for tags holding quotes or differing in case. So one condition, written per
database: `json_each` on SQLite (JSON1, which Django's JSONField requires there), `@>` on
PostgreSQL. `@>` is what a GIN index on the column serves (`CREATE INDEX … USING gin (tags
jsonb_path_ops)`); there is none yet: a tag filter is checked on the rows the list's
created_at order (or the analytics' range) reads.

The ORM uses `HasTag(F("tags"), tag)` as a filter; the analytics' hand-written SQL uses
`has_tag_sql` with a column of its own: both are this one condition.
"""

import json

from django.db import NotSupportedError, connection
from django.db.models import Lookup

from streams.core.checks import OUTPUT_DELTAS
from streams.models import NOT_OUTPUT_DELTA, Stream


def has_tag_sql(column_sql, tag, connection):
    """(SQL, params): the JSON list in `column_sql` (quoted SQL) has the string `tag`."""
    if connection.vendor == "postgresql":
        return f"{column_sql} @> %s::jsonb", [json.dumps([tag])]
    if connection.vendor == "sqlite":
        # a number 1 in the list is no match for "1": json_each gives it as an integer
        return f"EXISTS (SELECT 1 FROM json_each({column_sql}) WHERE json_each.value = %s)", [tag]
    raise NotSupportedError(f"tag filters are not written for {connection.vendor}")


class HasTag(Lookup):
    """`Stream.objects.filter(HasTag(F("tags"), "checkout"))`: a lookup used as an expression
    (Django ≥ 4.0), not registered on JSONField (it means nothing for other JSON fields)."""

    lookup_name = "has_tag"
    prepare_rhs = False  # a plain string, not JSON-encoded by the field

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        sql, params = has_tag_sql(lhs, self.rhs, connection)
        return sql, [*lhs_params, *params]


def distinct_stream_values(column, cond="1 = 1", params=()):
    """The distinct non-empty values of an indexed column of streams where `cond` (SQL with
    `params`) holds, by a loose index scan: one index seek per value (`MIN(col) WHERE col >
    previous`), instead of reading every row as `SELECT DISTINCT` does (the analytics' model
    lists, the admin's model filters)."""
    table = connection.ops.quote_name(Stream._meta.db_table)
    col = connection.ops.quote_name(column)
    sql = (
        f"WITH RECURSIVE v(x) AS ("
        f"SELECT MIN({col}) FROM {table} WHERE {col} > %s AND {cond} "
        f"UNION ALL SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > v.x AND {cond}) "
        f"FROM v WHERE v.x IS NOT NULL) SELECT x FROM v WHERE x IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, ["", *params, *params])
        return [r[0] for r in cursor.fetchall()]


def events_of_type(events, type):
    """`events` (an Event queryset) of one type, in a shape the partial index
    `event_sparse_type` serves for every type but the output deltas: the query holds the
    index's condition term by term (NOT_OUTPUT_DELTA), which SQLite needs to see that the
    index fits; the deltas are found among the newest rows by the table's own order."""
    events = events.filter(type=type)
    return events if type in OUTPUT_DELTAS else events.filter(NOT_OUTPUT_DELTA)
