"""A database of a test's own for testing a migration: empty, on the test database's server (a
SQLite file, or a PostgreSQL database dropped after), taking the default connection's place for
the block, and migrated forward only as far as the test needs.

    with own_database() as db:
        old = db.forward(("streams", "0009_sealed_secrets"))  # the models as they were there
        ...rows written with `old`...
        new = db.forward(("streams", "0010_warning_findings"))  # the migration tested
        ...its result read with `new`...

The test database stays at today's schema. These tests had migrated it backwards to the old
schema and forwards again to today's (45-55 s each on a loaded machine): nearly all of a
migration's CPU is Django rendering the models of each step, on either database (the whole
chain from nothing: ~17 s), and that took ~35 steps back and ~70 forward. From nothing to the
migration before the one tested, then that one, is the start of the chain, once; only a test
whose claim is read with today's code (the rollup migrations': an upgraded install reads the
same figures) takes its database on to today's schema."""

import contextlib
import copy
import os
import tempfile

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import load_backend


class OwnDatabase:
    def __init__(self, connection):
        self.connection = connection

    def forward(self, *targets):
        """Migrate forward to `targets`: (app, migration name) pairs, or an app's label for
        its latest migration; none: every app's latest (today's schema). Returns the models as
        they are there (a registry of historical models, a data migration's `apps`)."""
        executor = MigrationExecutor(self.connection)
        leaves = executor.loader.graph.leaf_nodes
        targets = [
            t
            for target in targets
            for t in (leaves(target) if isinstance(target, str) else [target])
        ] or leaves()
        plan = executor.migration_plan(targets)
        assert not any(backwards for _, backwards in plan), f"{targets}: not forward from here"
        return executor.migrate(targets, plan=plan).apps


@contextlib.contextmanager
def own_database():
    """The default connection, in this thread, on an empty database of the test's own for the
    block (yields an `OwnDatabase`). It needs no transaction of the test's: the test database
    is not touched (a `django_db` test's open transaction on it is left as it was)."""
    original = connections[DEFAULT_DB_ALIAS]
    settings = copy.deepcopy(original.settings_dict)
    wrapper = load_backend(settings["ENGINE"]).DatabaseWrapper
    with contextlib.ExitStack() as cleanup:
        if original.vendor == "sqlite":
            folder = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="migration-"))
            settings["NAME"] = os.path.join(folder, "db.sqlite3")
        else:
            settings["NAME"] = f"{original.settings_dict['NAME']}_migration"
            _server(original, _DROP, settings["NAME"])  # (one a killed run left)
            _server(original, "CREATE DATABASE {}", settings["NAME"])
            cleanup.callback(_server, original, _DROP, settings["NAME"])
        own = wrapper(settings, DEFAULT_DB_ALIAS)
        connections[DEFAULT_DB_ALIAS] = own
        try:
            yield OwnDatabase(own)
        finally:
            own.close()
            connections[DEFAULT_DB_ALIAS] = original
            _forget_ids()


_DROP = "DROP DATABASE IF EXISTS {} WITH (FORCE)"


def _server(connection, statement, name):
    # (a connection of its own to the server's maintenance database, outside any transaction)
    with connection._nodb_cursor() as cursor:
        cursor.execute(statement.format(connection.ops.quote_name(name)))


def _forget_ids():
    """Ids this process cached from the own database would name other rows in the test's."""
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()
