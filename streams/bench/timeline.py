"""`python manage.py bench timeline`: how soon a long packed stream's timeline opens in Chromium.

A realistic stream of about `--events` events (the simulator's, as `seed_demo` makes them:
wire-faithful Responses API JSON with receipt offsets; the maker spreads the length, so the
stream kept is the completed one nearest to it of up to 30, the first within 5 %) and a
baseline stream of about `--baseline-events` are stored as the recorder stores rows and packed
by the packer (streams/store/compact.py), in a fresh SQLite database (or the database of
`--database-url`, migrated first). A Daphne
serves the project; a real Chromium (/usr/bin/chromium, Playwright) logs in and opens each
timeline `--loads` times, the two streams' loads interleaved, each in a fresh page with a warm
browser. Per load: when the first window of rows was in the page and when the timing chart was
drawn (its canvas and its caption's table), in ms since the navigation started
(performance.now() in the page, read as each happens), and the server's CPU over the loads.

Printed: per stream its events, the p50 (and min, max) of first rows and of the chart, and the
server's CPU per load; the big stream's p50s over the baseline's. Target (issue 49): the
100k-event timeline's first rows and chart within 1 s.
"""

import argparse
import json
import random
import statistics
import sys
import time

from streams.bench import fail_if, manage, migrate, migrated_env, process_cpu_s
from streams.bench.relay import Server

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "bench-timeline"
# Recorded in the page as each happens: ms since the navigation started.
MARKS = """
(() => {
  const seen = () => ({
    rows: document.querySelector("#events-body tr") !== null,
    chart: document.querySelector("#timing-chart canvas") !== null
      && document.getElementById("timing-table")?.hidden === false,
  });
  window.__marks = {};
  const tick = () => {
    const now = seen();
    for (const name of ["rows", "chart"]) {
      if (now[name] && window.__marks[name] === undefined) window.__marks[name] = performance.now();
    }
    if (window.__marks.rows === undefined || window.__marks.chart === undefined) {
      requestAnimationFrame(tick);
    }
  };
  requestAnimationFrame(tick);
})();
"""


def add_arguments(parser):
    parser.add_argument("--events", type=int, default=100_000, help="events of the long stream")
    parser.add_argument("--baseline-events", type=int, default=1_000)
    parser.add_argument("--loads", type=int, default=7, help="page loads of each stream")
    parser.add_argument("--database-url", default="", help="(default: a fresh SQLite database)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)


def run(command, opts):
    if opts["child"]:
        return _seed(command, json.loads(opts["child"]), opts["make_stream"])
    tmp, env = migrated_env("timeline")
    if opts["database_url"]:
        env = {**env, "DATABASE_URL": opts["database_url"]}
        migrate(env)
    spec = {"sizes": [opts["baseline_events"], opts["events"]], "seed": opts["seed"]}
    started = time.monotonic()
    out = manage(env, "bench", "timeline", "--child", json.dumps(spec))
    streams = [json.loads(line) for line in out.splitlines() if line.strip()]
    seeded_s = time.monotonic() - started
    server = Server(
        [sys.executable, "-m", "dashboard.server", "-v", "0", "-b", "127.0.0.1", "-p", "{port}"]
        + ["dashboard.asgi:application"],
        env,
        tmp / "daphne.log",
    )
    try:
        results = _loads(f"http://127.0.0.1:{server.port}", streams, opts["loads"], server)
    finally:
        server.stop()
    base, big = results
    for result in results:
        result["seeded_s"] = round(seeded_s, 1)
    for key in ("rows_p50_ms", "chart_p50_ms"):
        big[key.replace("p50_ms", "over_baseline")] = round(big[key] / max(base[key], 0.001), 2)
    for result in results:
        if opts["json"]:
            command.stdout.write(json.dumps(result))
        else:
            command.stdout.write(
                f"{result['events']:>8,} events ({result['blocks']} blocks): first rows p50 "
                f"{result['rows_p50_ms']:7.0f} ms ({result['rows_min_ms']:.0f}–"
                f"{result['rows_max_ms']:.0f}), chart p50 {result['chart_p50_ms']:7.0f} ms "
                f"({result['chart_min_ms']:.0f}–{result['chart_max_ms']:.0f}), server CPU "
                f"{result['server_cpu_ms_per_load']:.0f} ms a load"
            )
    if not opts["json"]:
        command.stdout.write(
            f"long stream over the baseline: first rows ×{big['rows_over_baseline']}, "
            f"chart ×{big['chart_over_baseline']}"
        )
    fail_if([p for r in results for p in r["problems"]], "bench timeline")
    return results


def _loads(url, streams, loads, server):
    from playwright.sync_api import sync_playwright

    times = {s["id"]: {"rows": [], "chart": [], "cpu": 0.0} for s in streams}
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(60_000)
        page = context.new_page()
        page.goto(url + "/login/")
        page.fill("#id_username", "bench")
        page.fill("#id_password", PASSWORD)
        page.click("main button[type=submit]")
        page.wait_for_url(url + "/**")
        context.add_init_script(MARKS)
        errors = []
        for n in range(loads + 1):  # (the first round warms the browser's cache and the server)
            for stream in streams:
                page = context.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                cpu = process_cpu_s(server.proc.pid)
                page.goto(f"{url}/streams/{stream['id']}/")
                page.wait_for_function(
                    "() => window.__marks.rows !== undefined && window.__marks.chart !== undefined"
                )
                marks = page.evaluate("window.__marks")
                shown = page.locator("#events-body tr").count()
                page.close()
                if n:
                    times[stream["id"]]["rows"].append(marks["rows"])
                    times[stream["id"]]["chart"].append(marks["chart"])
                    times[stream["id"]]["cpu"] += process_cpu_s(server.proc.pid) - cpu
                if shown < min(stream["events"], 200):
                    problems.append(f"stream {stream['id']}: {shown} rows shown")
        browser.close()
    problems += [f"page error: {e}" for e in errors]
    out = []
    for stream in streams:
        got = times[stream["id"]]
        out.append(
            {
                "bench": "timeline",
                "events": stream["events"],
                "blocks": stream["blocks"],
                "loads": loads,
                **_figures("rows", got["rows"]),
                **_figures("chart", got["chart"]),
                "server_cpu_ms_per_load": round(1000 * got["cpu"] / max(loads, 1), 1),
                "problems": problems,
            }
        )
    return out


def _figures(name, values):
    return {
        f"{name}_p50_ms": round(statistics.median(values), 1),
        f"{name}_min_ms": round(min(values), 1),
        f"{name}_max_ms": round(max(values), 1),
    }


# ---------------------------------------------------------------------------------------------
# The child: the user and the streams, stored as rows and packed


def _seed(command, spec, make_stream):
    """(`make_stream`: seed_demo's, handed down by the bench command.)"""
    from django.contrib.auth.models import User

    from streams.models import EventBlock, Project

    rng = random.Random(spec["seed"])
    user = User.objects.filter(username="bench").first()
    if user is None:
        user = User.objects.create_user("bench", password=PASSWORD)
    project = Project.personal(user)
    for size in spec["sizes"]:
        stream_id, events = _stream(rng, size, user, project, make_stream)
        blocks = EventBlock.objects.filter(stream_id=stream_id).count()
        command.stdout.write(json.dumps({"id": stream_id, "events": events, "blocks": blocks}))


def _stream(rng, size, user, project, make_stream):
    """A simulator stream of about `size` events (within 10 %), stored as rows, then packed."""
    import datetime as dt

    from django.db import transaction

    from streams.models import Event, Stream
    from streams.store import compact

    base = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    asked, best = size, None
    for _ in range(30):
        made = make_stream(rng, base, [], asked)
        n = len(made[1])
        if made[0]["status"] == "completed" and (best is None or abs(n - size) < abs(best - size)):
            (fields, rows, _findings), best = made, n
            if abs(n - size) <= size / 20:
                break
        if n:
            asked = max(1, int(asked * size / n))
    if best is None or abs(best - size) > size / 4:
        raise SystemExit(f"bench timeline: the maker made no stream of about {size} events")
    fields = {k: v for k, v in fields.items() if k not in ("user_id", "created_at")}
    with transaction.atomic():
        stream = Stream.objects.create(**fields, user=user, project=project)
        events = [
            Event(
                stream=stream,
                index=i,
                t_us=t_us,
                received_at=base + dt.timedelta(microseconds=t_us),
                event_name="",
                type=type_,
                sequence_number=seq,
                output_index=out_i,
                content_index=content_i,
                is_json=is_json,
                data=data,
            )
            for i, (t_us, type_, seq, out_i, content_i, is_json, data) in enumerate(rows)
        ]
        Event.objects.bulk_create(events, batch_size=5_000)
    packed = compact.pack(stream.pk, grace_s=-3600)
    assert packed == len(rows), (packed, len(rows))
    return stream.pk, len(rows)
