"""Settings (streams.core.conf): typed, each default written once, each documented."""

import re

import pytest

from streams.core import conf
from tests.conftest import REPO


class TestFromEnviron:
    def test_it_keeps_only_what_the_environment_sets_parsed_to_its_type(self):
        got = conf.from_environ(
            {
                "STREAMSCOPE_BATCH_MAX_EVENTS": "100",
                "STREAMSCOPE_STALL_TIMEOUT_S": "1.5",
                "STREAMSCOPE_RELAY_LOCAL_FANOUT": "off",
                "STREAMSCOPE_RUNNER": " worker ",
                "UNRELATED": "x",
            }
        )
        assert got == {
            "BATCH_MAX_EVENTS": 100,
            "STALL_TIMEOUT_S": 1.5,
            "RELAY_LOCAL_FANOUT": False,
            "RUNNER": "worker",
        }

    @pytest.mark.parametrize(
        "name, value",
        [
            ("BATCH_MAX_EVENTS", "many"),
            ("STALL_TIMEOUT_S", "nan"),
            ("RUNNER", "threads"),
            ("UPSTREAM_TRANSPORT", "h2"),
        ],
    )
    def test_a_bad_value_stops_the_process_with_its_name(self, name, value):
        with pytest.raises((SystemExit, ValueError), match=name):
            conf.from_environ({f"STREAMSCOPE_{name}": value})


class TestGet:
    def test_defaults_come_from_the_dataclass(self, settings):
        settings.STREAMSCOPE = {}
        assert conf.get() == conf.Settings()
        assert conf.get().max_concurrent_per_user == 5

    def test_an_override_is_seen_at_once_and_typed(self, settings):
        settings.STREAMSCOPE = {"STALL_TIMEOUT_S": 2}
        assert conf.get().stall_timeout_s == 2.0 and isinstance(conf.get().stall_timeout_s, float)
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "STALL_TIMEOUT_S": 3.5}
        assert conf.get().stall_timeout_s == 3.5

    def test_an_unknown_name_is_an_error_not_an_ignored_knob(self, settings):
        settings.STREAMSCOPE = {"BATCH_MAX_EVENT": 10}
        with pytest.raises(KeyError, match="BATCH_MAX_EVENT"):
            conf.get()

    @pytest.mark.parametrize("value", ["10", True, None])
    def test_a_wrong_type_is_an_error(self, settings, value):
        settings.STREAMSCOPE = {"BATCH_MAX_EVENTS": value}
        with pytest.raises(TypeError, match="BATCH_MAX_EVENTS"):
            conf.get()


def test_every_setting_is_documented_in_the_readme():
    readme = (REPO / "README.md").read_text()
    missing = [n for n in conf.NAMES if f"`STREAMSCOPE_{n}`" not in readme]
    assert not missing, f"add to README's Configuration table: {missing}"
    # and the README names no setting that does not exist
    process_env = {"EVENT_LOOP", "TEST_OVERRIDES", "BENCH_PATTERN", "PG_DATA", "PG_BIN"}
    named = set(re.findall(r"STREAMSCOPE_([A-Z_]+[A-Z])", readme))
    assert named - set(conf.NAMES) - process_env == set()


def test_postgresql_connections_sort_in_memory(db):
    """The analytics' GROUP BYs get 32 MB per sort on PostgreSQL (the server's 4 MB spilled a
    user's 30-day histogram to disk), and no JIT (compiling a statement over many rollup rows
    took 30-60 ms each time); `?options=` in DATABASE_URL replaces both."""
    from django.db import connection

    from dashboard.settings import database_from_url

    assert database_from_url("postgres://u@h/n")["OPTIONS"] == {
        "options": "-c work_mem=32MB -c jit=off"
    }
    assert database_from_url("postgres://u@h/n?options=-c+work_mem%3D8MB")["OPTIONS"] == {
        "options": "-c work_mem=8MB"
    }
    assert "options" not in database_from_url("sqlite:///x.db")["OPTIONS"]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW work_mem")
            assert cursor.fetchone()[0] == "32MB"
            cursor.execute("SHOW jit")
            assert cursor.fetchone()[0] == "off"


@pytest.mark.parametrize(
    "name", ["TOKEN_FAILURE_LIMIT", "MAX_SOCKETS_PER_USER", "QUEUE_MAX_EVENTS"]
)
def test_a_limit_of_zero_or_less_stops_the_start_naming_it(name):
    for value in ("0", "-3"):
        with pytest.raises(ValueError, match=f"STREAMSCOPE {name}"):
            conf.from_environ({f"STREAMSCOPE_{name}": value})


def test_zero_stays_allowed_where_it_means_off():
    assert conf.from_environ({"STREAMSCOPE_RETAIN_EVENTS_DAYS": "0"}) == {"RETAIN_EVENTS_DAYS": 0}


def test_the_one_machine_secret_key_is_made_once_kept_0600_and_survives_restarts(tmp_path):
    from dashboard.settings import _kept_secret_key

    path = tmp_path / ".streamscope-secret-key"
    first = _kept_secret_key(path)
    assert len(first) >= 50 and (path.stat().st_mode & 0o777) == 0o600
    assert _kept_secret_key(path) == first  # the next start: the same key, sessions hold
    # DJANGO_SECRET_KEY wins (read in settings before the file is looked at)
    text = (REPO / "dashboard" / "settings.py").read_text()
    assert 'os.environ.get("DJANGO_SECRET_KEY") or _kept_secret_key(' in text
    assert ".streamscope-secret-key" in (REPO / ".gitignore").read_text()
