"""A stream's derived metrics, defined once: the recorder (live), the importer (HAR timings)
and `seed_demo` (synthetic history) all compute them here, from the same stored milestones.

Inputs are the stream's milestones in µs since its attempt started, exactly as stored in the
`*_us` columns, so a figure always agrees with the milestones a page shows beside it
(see docs/measurement.md):

- ``ttft_ms``: first output-bearing delta − request written (never `response.created`, never
  "asked httpx");
- ``duration_ms``: request written → connection closed;
- ``tokens_per_s`` / ``inter_token_ms``: over the span from the first to the last output delta,
  n deltas make n − 1 gaps;
- ``proxy_added_p50_ms`` / ``_p99_ms`` (proxied streams): per event, the time from its receipt
  from the upstream to its bytes being handed to the client's socket (`Event.sent_us − t_us`).

And the one definition of a percentile every figure uses (the analytics pages' SQL offsets and
histogram walks, the stream page, the benches): nearest rank. For the n values of a group
sorted ascending, x_1 ≤ … ≤ x_n, the q-quantile is x_k with k = ⌈q·n⌉ (and x_1 for k = 0);
p100 is the maximum. k is computed with integers, q in per mille (p50 = 500, p99 = 990), so
no floating-point product lands just above an integer (0.9 × 70 = 63.000…01): `rank`.
"""


def rank(q_permille, n):
    """The 1-based nearest rank of the q-quantile (q in per mille) among n values."""
    return max(1, (q_permille * n + 999) // 1000)


def nearest_rank(values, q_permille):
    """The q-quantile (q in per mille) of a list of values, by nearest rank; None values are
    left out, and an empty list has none (None)."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    return ordered[rank(q_permille, len(ordered)) - 1]


def weighted_nearest_rank(counts, q_permille):
    """The q-quantile (q in per mille) of values given as (value, how many) pairs, by nearest
    rank over the values each repeated that many times; None when there are none."""
    return weighted_nearest_ranks(counts, (q_permille,))[q_permille]


def weighted_nearest_ranks(counts, qs):
    """{q: the q-quantile} for each q (per mille) of `qs`, as `weighted_nearest_rank` gives
    it, from one sort of the pairs (a chart asks two or three of each of its hundreds of
    buckets)."""
    ordered = sorted(counts)
    total = sum(n for _, n in ordered)
    if not total:
        return dict.fromkeys(qs)
    wanted = sorted((rank(q, total), q) for q in qs)
    out, i, seen = {}, 0, 0
    for value, n in ordered:
        seen += n
        while i < len(wanted) and seen >= wanted[i][0]:
            out[wanted[i][1]] = value
            i += 1
        if i == len(wanted):
            return out
    raise AssertionError("unreachable: the ranks add up to the total")


def ttft_ms(request_written_us, first_token_us):
    if request_written_us is None or first_token_us is None:
        return None
    return (first_token_us - request_written_us) / 1000


def derived(
    *,
    request_written_us,
    first_token_us=None,
    closed_us=None,
    first_output_us=None,
    last_output_us=None,
    output_deltas=0,
):
    """The derived fields of a stream that can be known from these milestones (a dict of
    `Stream` field names; a field that cannot be known is left out, except `ttft_ms`, which is
    None when the request was written but no output came)."""
    fields = {}
    if request_written_us is not None:
        fields["ttft_ms"] = ttft_ms(request_written_us, first_token_us)
        if closed_us is not None:
            fields["duration_ms"] = (closed_us - request_written_us) / 1000
    if first_output_us is not None and last_output_us is not None and output_deltas > 1:
        span_us = last_output_us - first_output_us
        if span_us > 0:
            fields["tokens_per_s"] = (output_deltas - 1) / (span_us / 1e6)
            fields["inter_token_ms"] = span_us / 1000 / (output_deltas - 1)
    return fields


def proxy_added(delays):
    """p50/p99 of the proxy's added time per event, from `(delay µs, events)` pairs (every
    event of one received chunk waited as long), nearest rank."""
    delays = list(delays)
    fields = {}
    for name, q in (("proxy_added_p50_ms", 500), ("proxy_added_p99_ms", 990)):
        delay_us = weighted_nearest_rank(delays, q)
        if delay_us is not None:
            fields[name] = delay_us / 1000
    return fields
