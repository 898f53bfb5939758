"""Read-side query functions of the stream pages, a module per page: plain data in, plain
data out. Callers import from the module that owns a function; nothing is re-exported here.

- `stream_list`: the streams list (keyset pages, filters, the ranked search) and its export;
- `sessions`: a session's page (its own and a shared one);
- `stream_detail`: the timeline, the event table and an event's detail;
- `timing`: the timeline's chart and replay data (its own page's and a shared stream's);
- `output`: the one server rendering of a stream's output (the timeline, the playground);
- `common`: what several pages share (a page of stream rows, findings as a page words them).
(The analytics pages' queries are `dashboard/stats/`; how an event is summarised in one line
is the engine's, `streams/core/summaries.py`.)

Views call exactly one of these and render what it returns. Nothing here writes, and nothing
loads a table into Python: the list is a keyset page over the existing `created_at` indexes
(never COUNT(*) nor OFFSET), the event table reads index ranges through the unique
(stream, index) constraint, and the chart gets two flat arrays from `values_list`.

Everything an upstream or a model sent is untrusted text: it is returned as plain strings for
the templates to escape, never marked safe, and verbatim: secrets an upstream echoed are taken
out of the rendered page as it leaves, by the egress gate (streams/serve/egress.py), which also
catches a key cut by clipping or split across rows.
"""
