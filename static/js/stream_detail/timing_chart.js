/**
 * The inter-event timing chart (uPlot, a classic script loaded before the modules: window.uPlot)
 * from /streams/<id>/timing.json, or live from the events as they arrive.
 */
import { el } from "../dom.js";
import { fmtCount, fmtDuration, fmtGap, fmtMs } from "./format.js";
import { dec, fmt, num, t, tn } from "../i18n.js";
import { cssColor, onThemeChange } from "../palette.js";

const MIN_GAP_MS = 0.001; // receipt times are µs: the smallest gap above zero
const DENSE = 2000; // points above which the chart draws its own dots

/** The chart's colours in the theme in effect (app.css --chart-*, --err, --warn, --fg). */
function colours() {
  return {
    output: cssColor("chart-output", "#2f7fd6"),
    other: cssColor("chart-other", "#8b95a7"),
    proxy: cssColor("chart-proxy", "#e8590c"),
    axis: cssColor("chart-axis", "#3a4356"),
    grid: cssColor("chart-grid", "rgba(29, 35, 48, .08)"),
    lane: cssColor("chart-lane", "rgba(93, 102, 120, 0.5)"),
    band: cssColor("chart-band", "rgba(179, 38, 30, 0.13)"),
    burst: cssColor("chart-burst", "rgba(224, 161, 0, 0.9)"),
    err: cssColor("err", "#b3261e"),
    warn: cssColor("warn", "#a15c00"),
    replay: cssColor("fg", "#141a26"),
  };
}

/** `options` with its axes' text, ticks and grid in the theme's colours. */
function themed(options) {
  const c = colours();
  const line = { stroke: c.grid, width: 1 };
  options.axes = options.axes.map((a) => ({ stroke: c.axis, grid: line, ticks: line, ...a }));
  return options;
}

/** A points-only series. Dense ones draw square dots straight onto the canvas, one per
 * distinct pixel: uPlot's own points are arcs, far too slow for long streams (docs/performance.md). */
function dotSeries(label, color, size, dense) {
  // the legend says nothing where a series has no value (not "—"); the "0" lane reads 0
  const value = (u, v) => (v === null || v === undefined ? "" : v === u.zeroLane ? "0 ms" : `${fmtMs(v)} ms`);
  const series = { label, stroke: color, fill: color, value };
  if (!dense) {
    return { ...series, paths: () => null, points: { show: true, size, width: 0, fill: color } };
  }
  return {
    ...series,
    points: { show: false },
    paths: (u, sidx, i0, i1) => {
      const xs = u.data[0];
      const ys = u.data[sidx];
      const ctx = u.ctx;
      const px = Math.round(size * devicePixelRatio);
      const half = px / 2;
      const seen = new Set();
      ctx.save();
      ctx.beginPath();
      ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
      ctx.clip();
      ctx.fillStyle = color;
      for (let i = i0; i <= i1; i++) {
        const y = ys[i];
        if (y === null || y === undefined) continue;
        const x = Math.round(u.valToPos(xs[i], "x", true));
        const yy = Math.round(u.valToPos(y, "y", true));
        const key = x * 65536 + yy;
        if (seen.has(key)) continue;
        seen.add(key);
        ctx.fillRect(x - half, yy - half, px, px);
      }
      ctx.restore();
      return null;
    },
  };
}
/** The gap axis: decades from the one below the smallest gap above zero to the one above the
 * largest, and, when some gaps are 0 µs (events read in one go), a "0" lane one decade below
 * that, where those are drawn (a log axis has no 0; before, they sat at 1 µs on an axis
 * running to 0.0001 ms and a fast stream looked empty). The ticks are ours (`splits`):
 * uPlot's log splits need decade ends and looped on others ("Invalid array length").
 * `gaps`: every series' values (ms; 0 allowed). */
export function gapScale(gaps) {
  let min = Infinity;
  let max = 0;
  let zero = false;
  for (const values of gaps) {
    for (const v of values) {
      if (v === null || v === undefined || !Number.isFinite(v)) continue;
      if (v <= 0) zero = true;
      else {
        if (v < min) min = v;
        if (v > max) max = v;
      }
    }
  }
  if (!(max > 0)) {
    min = 1;
    max = 1;
  }
  const lowest = Math.floor(Math.log10(Math.max(min, MIN_GAP_MS)) + 1e-9);
  const highest = Math.floor(Math.log10(max) + 1e-9) + 1;
  const lane = zero ? Number(`1e${lowest - 1}`) : null;
  const splits = [];
  for (let e = zero ? lowest - 1 : lowest; e <= highest; e += 1) splits.push(Number(`1e${e}`));
  // half a decade of room under the lowest row, so its dots are not cut by the frame
  return { lane, splits, range: [splits[0] / 3, Number(`1e${highest}`)] };
}

export class TimingChart {
  /** `onPick(index)`: a point or a row of the longest-gaps table was clicked. `proxied`: the
   * stream came through the recording proxy, whose own delay per event is a third series. */
  constructor(onPick, { proxied = false } = {}) {
    this.onPick = onPick;
    this.proxied = proxied;
    this.box = document.getElementById("timing-chart");
    this.caption = document.getElementById("timing-caption");
    this.table = document.getElementById("timing-table");
    this.reset();
    this.plot = null;
    this.replayMs = null;
    this.pendingDraw = 0;
    if (this.box) new ResizeObserver(() => this.resize()).observe(this.box);
    onThemeChange(() => this.draw(true)); // the series' colours are in the options: build again
  }

  reset() {
    this.xs = []; // seconds since the attempt started
    this.out = []; // gap (ms) of output deltas, else null
    this.other = []; // gap (ms) of other events, else null
    this.proxy = []; // proxied streams: ms the proxy held the event (receipt → client), or null
    this.indexes = [];
    this.lastUs = 0;
    this.marks = [];
    this.silence = null;
    this.outlined = false; // the points are a long stream's outline, not every event
  }

  /** `sentUs`: when the proxy handed the event to its client (proxied streams; else absent). */
  push(index, tUs, isOutput, sentUs) {
    if (tUs === null || tUs === undefined) return;
    const gap = Math.max((tUs - this.lastUs) / 1000, 0); // 0: drawn in the "0" lane
    this.lastUs = tUs;
    this.xs.push(tUs / 1e6);
    this.out.push(isOutput ? gap : null);
    this.other.push(isOutput ? null : gap);
    const held = sentUs === null || sentUs === undefined ? null : Math.max((sentUs - tUs) / 1000, 0);
    this.proxy.push(held);
    this.indexes.push(index);
  }

  load(data) {
    this.reset();
    if (!data.count) {
      this.caption.textContent = t("No events were received: nothing to chart.");
      this.box.hidden = true;
      return;
    }
    if (!data.timed) {
      this.caption.textContent = t(
        "This stream has no receipt times (an imported .sse file keeps none): nothing to chart.",
      );
      this.box.hidden = true;
      return;
    }
    const at = data.points ? this.loadPoints(data.points) : this.loadEvents(data);
    this.marks = data.marks || [];
    // A stalled attempt ends in silence: chart it up to the close, as a band.
    if (data.status === "stalled" && data.closed_us && data.closed_us > at) {
      this.xs.push(data.closed_us / 1e6);
      this.out.push(null);
      this.other.push(null);
      this.proxy.push(null);
      this.indexes.push(null);
      this.silence = [at / 1e6, data.closed_us / 1e6];
    }
    this.draw(true);
    this.describe(data);
  }

  /** Every event's gap (`gap_us`, `kind`…): the receipt times rebuilt by a running sum. */
  loadEvents(data) {
    const types = data.types || [];
    const output = new Set(data.output_types || []);
    const isOut = types.map((type) => output.has(type));
    let at = 0;
    const gaps = data.gap_us;
    const held = data.proxy_us;
    for (let i = 0; i < gaps.length; i++) {
      at += gaps[i];
      const sent = held && held[i] !== null ? at + held[i] : null;
      this.push(data.index ? data.index[i] : data.first + i, at, isOut[data.kind[i]], sent);
    }
    return at;
  }

  /** A long stream's outline: the events the chart would draw, one a cell of its grid, each
   * in one series (0 output delta, 1 other event, 2 the proxy's delay), in time order. */
  loadPoints(points) {
    const n = points.index.length;
    const columns = [this.out, this.other, this.proxy];
    for (let i = 0; i < n; i++) {
      const value = Math.max(points.value_us[i] / 1000, 0);
      this.xs.push(points.at_us[i] / 1e6);
      for (let s = 0; s < columns.length; s++) columns[s].push(s === points.series[i] ? value : null);
      this.indexes.push(points.index[i]);
    }
    this.outlined = true;
    return n ? points.at_us[n - 1] : 0;
  }

  describe(data) {
    const s = data.stats;
    if (!s) {
      this.caption.textContent = fmt(
        tn("%(n)s event: too few to chart gaps.", "%(n)s events: too few to chart gaps.", data.count),
        { n: fmtCount(data.count) },
      );
      return;
    }
    // Counted from the findings (the server's `flagged`), not from the marks drawn: a stall
    // before the connection closed is at no event, and has no mark of its own.
    const flagged = data.flagged || {};
    const stalls = flagged.stall ?? this.marks.filter((m) => m.code === "stall").length;
    const bursts = flagged.buffered_delivery ?? this.marks.filter((m) => m.code === "buffered_delivery").length;
    const longest = s.longest[0];
    let text =
      fmt(tn("%(n)s event over %(duration)s. ", "%(n)s events over %(duration)s. ", data.count), {
        n: fmtCount(data.count),
        duration: fmtDuration(s.duration_ms),
      }) +
      fmt(
        t(
          "Time since the previous event: median %(median)s, 90th percentile %(p90)s, " +
            "99th %(p99)s, longest %(longest)s (before event %(index)s). ",
        ),
        {
          median: fmtGap(s.median_ms),
          p90: fmtGap(s.p90_ms),
          p99: fmtGap(s.p99_ms),
          longest: fmtGap(s.max_ms),
          index: longest.index,
        },
      );
    if (stalls || bursts) {
      text +=
        fmt(tn("Marked: %(n)s stall (red bands)", "Marked: %(n)s stalls (red bands)", stalls), { n: stalls }) +
        fmt(tn(" and %(n)s buffered burst (amber lines). ", " and %(n)s buffered bursts (amber lines). ", bursts), {
          n: bursts,
        });
    } else {
      text += t("No stall or buffered burst was flagged. ");
    }
    if (s.approximate) {
      text += t(
        "A long stream: each dot stands for the events at its place, and the median and " +
          "percentiles are read from a histogram (within 0.5 %). ",
      );
    }
    if (this.silence) {
      const quiet = (this.silence[1] - this.silence[0]) * 1000;
      text += fmt(
        t(
          "After the last event nothing came for %(duration)s, until the stall timeout aborted " +
            "the attempt (red band at the end). ",
        ),
        { duration: fmtDuration(quiet) },
      );
    }
    text += t("Blue: output deltas; grey: other events. ");
    if (this.proxied) {
      const p = data.proxy || {};
      text +=
        p.p50_ms === null || p.p50_ms === undefined
          ? t("Orange: the proxy's own delay per event, from its receipt from the upstream to handing it to the client. ")
          : fmt(
            t(
              "Orange: the proxy's own delay per event, from its receipt from the upstream to " +
                "handing it to the client (median %(median)s, 99th %(p99)s). ",
            ),
            { median: fmtGap(p.p50_ms), p99: fmtGap(p.p99_ms) },
          );
    }
    text += t("Drag to zoom, double-click to reset, click a point to open its event.");
    this.caption.textContent = text;
    const body = this.table.querySelector("tbody");
    body.replaceChildren();
    for (const row of s.longest) {
      const tr = el("tr");
      const cell = el("td", "num");
      const button = el("button", "ev-open", String(row.index));
      button.type = "button";
      button.addEventListener("click", () => this.onPick(row.index));
      cell.append(button);
      tr.append(cell, el("td", "num", fmtMs(row.gap_ms)));
      body.append(tr);
    }
    this.table.hidden = false;
  }

  /** Live: a summary of what arrived so far. */
  describeLive() {
    if (!this.xs.length) return;
    let max = 0;
    let at = 0;
    for (let i = 1; i < this.xs.length; i++) {
      const gap = this.out[i] ?? this.other[i];
      if (gap > max) {
        max = gap;
        at = this.indexes[i];
      }
    }
    let text = fmt(
      tn(
        "Live: %(n)s event over %(duration)s so far; longest pause %(gap)s (before event %(index)s).",
        "Live: %(n)s events over %(duration)s so far; longest pause %(gap)s (before event %(index)s).",
        this.xs.length,
      ),
      { n: fmtCount(this.xs.length), duration: fmtDuration(this.xs.at(-1) * 1000), gap: fmtGap(max), index: at },
    );
    if (this.proxied) {
      let held = null;
      for (const v of this.proxy) if (v !== null && (held === null || v > held)) held = v;
      if (held !== null) text += fmt(t(" The proxy held an event at most %(gap)s (orange)."), { gap: fmtGap(held) });
    }
    this.caption.textContent = text;
  }

  options() {
    const marks = this;
    const dense = this.xs.length > DENSE;
    const label = (v) => (v === marks.scale.lane ? "0" : v >= 1000 ? fmtCount(v) : dec(+v.toPrecision(3), 6));
    return {
      width: Math.max(300, this.box.clientWidth),
      height: 240,
      scales: {
        // one point (min === max), or none yet, must not give uPlot an empty or NaN range
        x: { time: false, range: (u, min, max) =>
          !(Number.isFinite(min) && Number.isFinite(max)) ? [0, 1]
            : min === max ? [Math.max(0, min - 0.5), max + 0.5] : [min, max] },
        y: { distr: 3, log: 10, range: () => this.scale.range },
      },
      legend: { live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 7 } },
      axes: [
        { label: t("seconds since the request"), labelSize: 20, size: 34, space: 60,
          values: (u, ticks) => ticks.map((v) => (v === null ? "" : dec(+v.toFixed(3), 3))) },
        { label: this.proxied ? t("ms: gap · proxy added") : t("ms since previous event"),
          labelSize: 20, size: 56,
          // powers of ten only (the log scale's minor splits made a striped background), and
          // the "0" lane of 0-µs gaps at the bottom
          splits: () => this.scale.splits,
          values: (u, ticks) => ticks.map((v) => (v === null ? "" : label(v))) },
      ],
      series: [
        { label: t("t (s)"), value: (u, v) => (v === null || v === undefined ? "" : num(v, 4)) },
        dotSeries(t("output delta"), colours().output, dense ? 3 : 5, dense),
        dotSeries(t("other event"), colours().other, dense ? 4 : 6, dense),
        // same unit, same axis: the proxy's delay reads against the gaps it sits between
        ...(this.proxied ? [dotSeries(t("proxy added"), colours().proxy, dense ? 3 : 4, dense)] : []),
      ],
      hooks: {
        draw: [(u) => marks.drawMarks(u)],
        setData: [(u) => { u.zeroLane = marks.scale.lane; }],
        init: [(u) => { u.zeroLane = marks.scale.lane; }],
      },
    };
  }

  drawMarks(u) {
    const ctx = u.ctx;
    const { top, height } = u.bbox;
    const c = colours();
    ctx.save();
    if (this.scale.lane !== null) {
      // the "0" lane's upper edge: gaps below it are 0 µs, not a value on the log axis
      const y = u.valToPos(this.scale.lane * Math.sqrt(10), "y", true);
      ctx.strokeStyle = c.lane;
      ctx.lineWidth = devicePixelRatio;
      ctx.setLineDash([4 * devicePixelRatio, 3 * devicePixelRatio]);
      ctx.beginPath();
      ctx.moveTo(u.bbox.left, y);
      ctx.lineTo(u.bbox.left + u.bbox.width, y);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
    ctx.textAlign = "left"; // uPlot leaves its axes' alignment on the context
    ctx.textBaseline = "alphabetic";
    for (const mark of this.marks) {
      const i = this.position(mark.event_index);
      if (i < 0) continue;
      const x = u.valToPos(this.xs[i], "x", true);
      if (mark.code === "stall") {
        const x0 = u.valToPos(i > 0 ? this.xs[i - 1] : 0, "x", true);
        // (an outline's point before the marked one may be several events earlier: the band
        // then starts there, at most a cell of the grid wide too early)
        ctx.fillStyle = c.band;
        ctx.fillRect(x0, top, Math.max(x - x0, 2), height);
        ctx.fillStyle = c.err;
        ctx.fillText(t("stall"), x0 + 4, top + 12 * devicePixelRatio);
      } else {
        ctx.strokeStyle = c.burst;
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, top + height);
        ctx.stroke();
        ctx.fillStyle = c.warn;
        ctx.fillText(t("burst"), x + 3, top + 24 * devicePixelRatio);
      }
    }
    if (this.silence) {
      const [x0, x1] = this.silence.map((v) => u.valToPos(v, "x", true));
      ctx.fillStyle = c.band;
      ctx.fillRect(x0, top, Math.max(x1 - x0, 2), height);
      ctx.fillStyle = c.err;
      ctx.fillText(t("no event until the stall timeout: aborted"), x0 + 4, top + 12 * devicePixelRatio);
    }
    if (this.replayMs !== null) {
      const x = u.valToPos(this.replayMs / 1000, "x", true);
      ctx.strokeStyle = c.replay;
      ctx.lineWidth = 1.5 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
    }
    ctx.restore();
  }

  /** Position of an event index in the arrays (indexes ascend). An outline keeps some events
   * only: there, the first point at or after the index (in the same cell of the grid, or the
   * next one the stream reached). */
  position(index) {
    let lo = 0;
    let hi = this.indexes.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const v = this.indexes[mid];
      if (v === index) return mid;
      if (v < index) lo = mid + 1;
      else hi = mid - 1;
    }
    return this.outlined && lo < this.indexes.length ? lo : -1;
  }

  data() {
    const gaps = [this.out, this.other];
    if (this.proxied) gaps.push(this.proxy);
    this.scale = gapScale(gaps);
    const lane = this.scale.lane;
    const y = (v) => (!Number.isFinite(v) ? null : v <= 0 ? lane : v);
    return [this.xs.map((v) => (Number.isFinite(v) ? v : null)), ...gaps.map((values) => values.map(y))];
  }

  draw(rebuild = false) {
    if (!this.box || !window.uPlot || !this.xs.length) return;
    this.box.hidden = false;
    if (this.plot && !rebuild) {
      this.plot.setData(this.data());
      return;
    }
    this.plot?.destroy();
    this.box.replaceChildren();
    const data = this.data(); // first: the options read the gap scale it sets
    this.plot = new window.uPlot(themed(this.options()), data, this.box);
    let down = null;
    this.plot.over.addEventListener("mousedown", (e) => (down = [e.clientX, e.clientY]));
    this.plot.over.addEventListener("click", (e) => {
      const moved = down && Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 3;
      const i = this.plot.cursor.idx;
      const index = i === null || i === undefined ? null : this.indexes[i];
      if (!moved && index !== null && index !== undefined) this.onPick(index);
    });
  }

  /** Live points: redraw at most every 250 ms. */
  scheduleDraw() {
    if (this.pendingDraw) return;
    this.pendingDraw = setTimeout(() => {
      this.pendingDraw = 0;
      try {
        this.draw();
        this.describeLive();
      } catch (error) {
        // The chart is an aid: a drawing error must never stop the live page.
        console.error("timing chart:", error);
      }
    }, 250);
  }

  /** The stream ended: no more live redraws (the stored timing replaces the live points). */
  stopLive() {
    clearTimeout(this.pendingDraw);
    this.pendingDraw = 0;
  }

  setReplay(ms) {
    this.replayMs = ms;
    this.plot?.redraw(false, false);
  }

  resize() {
    if (this.plot && this.box.clientWidth) {
      this.plot.setSize({ width: this.box.clientWidth, height: 240 });
    }
  }
}
