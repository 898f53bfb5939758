"""Recorded timing against the wire: a loopback capture (tests/support/wire.py) is the ground
truth.

The kernel stamps every packet on `lo` whatever either event loop is doing, so these tests hold
on a busy machine too: with a process busy-looping on one core beside them, every stream's TTFT
must be the wire's within ±1 ms — the time from the request's last packet to the packet that
completed the first output delta, or, when our process got to the socket so late that later
deltas were already queued behind it, to the newest of those (one read's kernel stamp is that
of its newest bytes; docs/measurement.md). The same test on a quiet machine is
tests/test_recorder.py's `test_ttft_matches_with_50_concurrent_streams`."""

import pytest

from .support import wire

pytestmark = pytest.mark.django_db(transaction=True)


async def test_ttft_is_the_wires_with_a_cpu_hog_beside_50_concurrent_streams(upstream):
    streams, judgements = await wire.record_50_on_the_wire(upstream, hog=True)
    wire.assert_ttft_within_tolerance(streams, judgements)


async def test_the_stream_records_which_clock_stamped_it(upstream, settings):
    from streams.ingest.upstream import ClientPool

    streams = {}
    for clock in ("loop", "kernel"):
        # (a pool each: a kept-alive connection keeps the clock it was opened with)
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "RECEIPT_CLOCK": clock}
        pool = ClientPool()
        try:
            (streams[clock],) = await wire.record_concurrently(1, time_scale=0.05, client=pool)
        finally:
            await pool.aclose()
    loop_stream, kernel_stream = streams["loop"], streams["kernel"]
    assert (loop_stream.receipt_clock, kernel_stream.receipt_clock) == ("loop", "kernel")
    assert loop_stream.status == kernel_stream.status == "completed"
