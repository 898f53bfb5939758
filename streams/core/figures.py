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
"""

import math


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
    output_tokens=0,
):
    """The derived fields of a stream that can be known from these milestones (a dict of
    `Stream` field names; a field that cannot be known is left out, except `ttft_ms`, which is
    None when the request was written but no output came)."""
    fields = {}
    if request_written_us is not None:
        fields["ttft_ms"] = ttft_ms(request_written_us, first_token_us)
        if closed_us is not None:
            fields["duration_ms"] = (closed_us - request_written_us) / 1000
    if first_output_us is not None and last_output_us is not None and output_tokens > 1:
        span_us = last_output_us - first_output_us
        if span_us > 0:
            fields["tokens_per_s"] = (output_tokens - 1) / (span_us / 1e6)
            fields["inter_token_ms"] = span_us / 1000 / (output_tokens - 1)
    return fields


def proxy_added(delays):
    """p50/p99 of the proxy's added time per event, from `(delay µs, events)` pairs (every
    event of one received chunk waited as long), nearest rank."""
    ordered = sorted(delays)
    total = sum(n for _, n in ordered)
    fields = {}
    if not total:
        return fields
    for name, q in (("proxy_added_p50_ms", 0.50), ("proxy_added_p99_ms", 0.99)):
        rank = max(1, math.ceil(q * total))
        seen = 0
        for delay_us, n in ordered:
            seen += n
            if seen >= rank:
                fields[name] = delay_us / 1000
                break
    return fields
