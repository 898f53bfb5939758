"""Derived metrics (streams.core.figures): one definition, and every writer of a stream row agrees
with it exactly — the recorder, the importer and seed_demo."""

import io

import pytest
from django.core.management import call_command

from streams.core import figures
from streams.models import Stream


class TestDerived:
    def test_it_derives_every_figure_from_the_milestones(self):
        got = figures.derived(
            request_written_us=1_000,
            first_token_us=251_000,
            closed_us=1_001_000,
            first_output_us=251_000,
            last_output_us=751_000,
            output_deltas=11,
        )
        assert got == {
            "ttft_ms": 250.0,
            "duration_ms": 1000.0,
            "tokens_per_s": 20.0,  # 10 gaps in 0.5 s
            "inter_token_ms": 50.0,
        }

    def test_without_output_ttft_is_none_and_rates_are_absent(self):
        got = figures.derived(request_written_us=1_000, closed_us=5_000, output_deltas=0)
        assert got == {"ttft_ms": None, "duration_ms": 4.0}

    def test_without_a_written_request_nothing_is_timed_from_it(self):
        got = figures.derived(request_written_us=None, first_token_us=9, closed_us=10)
        assert got == {}

    @pytest.mark.parametrize("tokens, last", [(1, 900), (5, 100)])
    def test_one_token_or_no_span_gives_no_rate(self, tokens, last):
        got = figures.derived(
            request_written_us=0, first_output_us=100, last_output_us=last, output_deltas=tokens
        )
        assert "tokens_per_s" not in got and "inter_token_ms" not in got


def agrees(stream):
    """The stored figures equal what streams.core.figures derives from the stored milestones."""
    want = figures.derived(
        request_written_us=stream.request_written_us,
        first_token_us=stream.first_token_us,
        closed_us=stream.closed_us,
    )
    return all(getattr(stream, name) == value for name, value in want.items())


@pytest.mark.django_db
def test_seed_demo_streams_agree_with_the_definition():
    call_command("seed_demo", "--streams", "60", "--days", "1", stdout=io.StringIO())
    streams = list(Stream.objects.all())
    assert len(streams) == 60
    assert sum(s.ttft_ms is not None for s in streams) > 30
    assert all(agrees(s) for s in streams)
    rated = [s for s in streams if s.tokens_per_s]
    assert rated
    for s in rated:
        assert s.inter_token_ms == pytest.approx(1000 / s.tokens_per_s)


@pytest.mark.django_db(transaction=True)
async def test_recorded_streams_agree_with_the_definition(upstream):
    from tests.support.recording import body, record

    # at a real model's pace: at 0.05 a loaded CI's reader once got every output delta in one
    # read (one receipt time, no span to rate), which the definition rightly leaves unrated
    stream, _ = await record(body(time_scale=1))
    assert stream.ttft_ms is not None and stream.tokens_per_s > 0
    assert agrees(stream)
