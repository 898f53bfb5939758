/* Streamscope analytics charts, drawn with the vendored uPlot (an ES module; uPlot is the
 * classic script before it, window.uPlot).
 *
 * Read at a glance: a model has one colour on every page (palette.js), times are in the page's
 * zone and language, 24-hour (time.js), a series with isolated values draws them as points (a
 * one-bucket line draws nothing), legends show nothing rather than "–" where a series has no
 * value.
 *
 * A chart is an element `<div class="chart" data-chart="KIND" data-source="ID">`; its data is
 * the JSON of `<script type="application/json" id="ID">` (Django's json_script, so it is
 * escaped). Model names are untrusted: they reach the page only as text (uPlot writes legend
 * labels with textContent and axis values onto the canvas), never as HTML.
 *
 * Charts are (re)drawn on page load and after every htmx swap (the pages poll), and resized
 * with their container. Open <details> table views stay open across swaps.
 * A page that polls must render its chart data inside the swapped region.
 */
import { count, dec, fmt, money, ms, num, pct, t, tn } from "./i18n.js";
import { alpha, colorFor, cssColor, onThemeChange } from "./palette.js";
import { zoneAxis } from "./time.js";

(function () {
  const HEIGHT = 260;
  // xgettext:no-javascript-format
  const AUTO_SHARE = t("% of auto requests");
  // the theme's colours (app.css), read again before every drawing (draw)
  let ACCENT = "#0072B2"; // one-series charts: the palette's first colour
  let FAILED = "#D55E00"; // the palette's vermillion
  let CARD = "#fff"; // hollow points: the card behind the chart
  let AXIS = { stroke: "#3a4356", grid: { stroke: "rgba(29, 35, 48, .08)", width: 1 } };

  function readColours() {
    ACCENT = cssColor("model-0", "#0072B2");
    FAILED = cssColor("model-3", "#D55E00");
    CARD = cssColor("card", "#fff");
    const grid = cssColor("chart-grid", "rgba(29, 35, 48, .08)");
    AXIS = { stroke: cssColor("chart-axis", "#3a4356"), grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  }

  /** Whether a series has a value with no value on either side: a line cannot show it. */
  function isolated(values) {
    return values.some((v, i) => v != null && values[i - 1] == null && values[i + 1] == null);
  }

  /** A time chart's x: the page's zone and language, 24-hour ticks and legend. */
  function timeX() {
    const axis = zoneAxis(uPlot);
    return { tzDate: axis.tzDate, axis: axis.axis, series: axis.series };
  }

  // Data of swapped-in content. htmx is configured with allowScriptTags: false, so it drops
  // every <script> of a swapped fragment, the json_script data ones included; they are read
  // from the response here instead (DOMParser never runs scripts), by id.
  let swappedData = {};

  function readJSON(id) {
    const el = document.getElementById(id);
    if (el) return JSON.parse(el.textContent);
    return id in swappedData ? JSON.parse(swappedData[id]) : null;
  }

  const fmtMs = (v) => (v == null ? "" : ms(v));

  function base(el, extra) {
    if (extra.axes) extra.axes = extra.axes.map((a) => ({ ...AXIS, ...a })); // axis text and grid in the theme's colours
    return Object.assign({
      width: Math.max(el.clientWidth, 240),
      height: HEIGHT,
      legend: { live: true },
      cursor: { drag: { x: true, y: false } },
    }, extra);
  }

  const NANO = 1e9;
  // a currency's colour: the palette's first two (app.css --model-0, --model-1)
  const CURRENCY_COLOURS = { EUR: ["model-0", "#0072B2"], USD: ["model-1", "#E69F00"] };

  /** A y axis's width: its longest tick label (amounts of up to nine places) and a margin. */
  function labelSize(u, values) {
    if (!values || !values.length) return 50;
    return Math.ceil(Math.max(...values.map((v) => String(v).length)) * 7.5) + 18;
  }

  const builders = {
    // Spend over time (the usage page): {t: [bucket starts], series: [{currency, nanos: [cost
    // in nano-units, null where nothing had a price]}]}. One line and one axis per currency:
    // EUR and USD are never added, nor drawn on one scale.
    spend(el, d) {
      if (!d.series.length) return null;
      const x = timeX();
      const data = [d.t];
      const series = [x.series];
      const axes = [x.axis];
      const scales = {};
      d.series.forEach((s, i) => {
        const [name, fallback] = CURRENCY_COLOURS[s.currency] || ["model-2", "#009E73"];
        const colour = cssColor(name, fallback);
        const values = s.nanos.map((v) => (v == null ? null : v / NANO));
        const label = fmt(t("cost (%(currency)s)"), { currency: s.currency });
        const show = (v) => (v == null ? "" : money(Math.round(v * NANO), s.currency));
        data.push(values);
        scales[s.currency] = { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] };
        series.push({
          label, scale: s.currency, stroke: colour, fill: alpha(colour, 0.08), width: 2, spanGaps: false,
          points: { show: isolated(values), size: 7, fill: colour }, value: (u, v) => show(v),
        });
        axes.push({
          scale: s.currency, label, side: i === 0 ? 3 : 1, size: labelSize,
          grid: i === 0 ? AXIS.grid : { show: false }, values: (u, vals) => vals.map(show),
        });
      });
      return new uPlot(base(el, { tzDate: x.tzDate, scales, axes, series }), data, el);
    },

    // TTFT histogram: one stepped outline per model, x = bin start (ms)
    histogram(el, d) {
      const xs = d.edges;
      const data = [xs];
      const series = [{ label: t("TTFT"), value: (u, v) => v == null ? "" : `${num(v)}–${num(v + d.width)} ms` }];
      for (const s of d.series) {
        data.push(s.counts);
        const c = colorFor(s.model);
        series.push({
          label: s.model, stroke: c, fill: alpha(c, 0.12), width: 1.5,
          paths: uPlot.paths.stepped({ align: 1 }),
          points: { show: false }, // an outline, not a dot per bin (empty bins included)
          value: (u, v) => v == null ? "" : count(v),
        });
      }
      return new uPlot(base(el, {
        scales: { x: { time: false } },
        axes: [
          { label: t("TTFT (ms)"), values: (u, vals) => vals.map((v) => dec(v, 6)) },
          { label: t("streams"), values: (u, vals) => vals.map((v) => dec(v, 6)) },
        ],
        series,
      }), data, el);
    },

    // TTFT p50 (solid) and p95 (dashed) per model over time
    timeseries(el, d) {
      const x = timeX();
      const data = [d.t];
      const series = [x.series];
      for (const s of d.series) {
        const c = colorFor(s.model);
        data.push(s.p50);
        series.push({ label: `${s.model} p50`, stroke: c, width: 2, spanGaps: false, value: (u, v) => fmtMs(v),
          points: { show: isolated(s.p50), size: 7, fill: c } });
        if (s.p95) {
          data.push(s.p95);
          series.push({ label: `${s.model} p95`, stroke: c, width: 1, dash: [5, 4], spanGaps: false, value: (u, v) => fmtMs(v),
            points: { show: isolated(s.p95), size: 5, fill: CARD } });
        }
      }
      return new uPlot(base(el, {
        tzDate: x.tzDate,
        axes: [x.axis, { label: t("TTFT (ms)"), size: 60, values: (u, vals) => vals.map((v) => dec(v, 6)) }],
        series,
      }), data, el);
    },

    // scores (the latency page, dashboard/stats/scores.py): the mean score per model over
    // time, {t, minimum, maximum, series: [{model, n: [scores], mean: [mean or null]}]}, on
    // the score type's own range; the legend says how many scores each mean is of
    scores(el, d) {
      const x = timeX();
      const data = [d.t];
      const series = [x.series];
      for (const s of d.series) {
        const c = colorFor(s.model);
        data.push(s.mean);
        series.push({ label: s.model, stroke: c, width: 2, spanGaps: false,
          points: { show: isolated(s.mean), size: 7, fill: c },
          value: (u, v, si, i) => v == null ? "" : fmt(tn("%(mean)s (%(n)s score)", "%(mean)s (%(n)s scores)", s.n[i]), { mean: dec(v, 2), n: count(s.n[i]) }) });
      }
      const lo = d.minimum, hi = d.maximum > d.minimum ? d.maximum : d.minimum + 1;
      return new uPlot(base(el, {
        tzDate: x.tzDate,
        scales: { y: { range: [lo, hi] } },
        axes: [x.axis, { label: t("mean score"), size: 60, values: (u, vals) => vals.map((v) => dec(v, 6)) }],
        series,
      }), data, el);
    },

    // routing: share of each resolved model among auto requests (bars)
    share(el, d) {
      const xs = d.map((_, i) => i);
      const names = d.map((r) => r.model || t("(none)"));
      const data = [xs, d.map((r) => r.share_pct)];
      return new uPlot(base(el, {
        scales: { x: { time: false, range: [-0.5, xs.length - 0.5] }, y: { range: [0, 100] } },
        axes: [
          {
            values: (u, vals) => vals.map((v) => Number.isInteger(v) && names[v] != null ? names[v] : ""),
            splits: () => xs, rotate: -25, size: 70, gap: 4,
          },
          { label: AUTO_SHARE, values: (u, vals) => vals.map((v) => dec(v, 6)) },
        ],
        series: [
          { label: t("model"), value: (u, v) => v == null ? "" : names[v] },
          {
            // each bar in its model's colour, as on every other chart
            label: t("share"), stroke: ACCENT, fill: alpha(ACCENT, 0.6),
            paths: uPlot.paths.bars({
              size: [0.6, 80],
              disp: { fill: { unit: 3, values: () => names.map((n) => alpha(colorFor(n), 0.75)) },
                stroke: { unit: 3, values: () => names.map((n) => colorFor(n)) } },
            }),
            points: { show: false },
            value: (u, v) => v == null ? "" : pct(v),
          },
        ],
      }), data, el);
    },

    // routing: share of each resolved model per time bucket (lines, %)
    trend(el, d) {
      const x = timeX();
      const totals = d.t.map((_, i) => d.series.reduce((a, s) => a + s.n[i], 0));
      const data = [d.t];
      const series = [x.series];
      for (const s of d.series) {
        const c = colorFor(s.model);
        const values = s.n.map((n, i) => totals[i] ? 100 * n / totals[i] : null);
        data.push(values);
        series.push({ label: s.model, stroke: c, width: 2, spanGaps: false,
          points: { show: isolated(values), size: 7, fill: c },
          value: (u, v) => v == null ? "" : pct(v) });
      }
      return new uPlot(base(el, {
        tzDate: x.tzDate,
        scales: { y: { range: [0, 100] } },
        axes: [x.axis, { label: AUTO_SHARE, values: (u, vals) => vals.map((v) => dec(v, 6)) }],
        series,
      }), data, el);
    },

    // two streams side by side (dashboard/stats/compare.py): [{label, x: [ms since the
    // request], y: [output characters so far], ttft_ms}], stepped lines on one x axis (the
    // union of both streams' times), each TTFT a dashed line in its stream's colour
    arrivals(el, d) {
      if (!d.some((s) => s.x.length)) return null;
      const xs = Array.from(new Set(d.flatMap((s) => s.x))).sort((p, q) => p - q);
      const at = new Map(xs.map((x, i) => [x, i]));
      const colours = [cssColor("model-0", "#0072B2"), cssColor("model-1", "#E69F00")];
      const data = [xs];
      const series = [{ label: t("since the request"), value: (u, v) => v == null ? "" : `${ms(v)} ms` }];
      d.forEach((s, k) => {
        const ys = new Array(xs.length).fill(null);
        s.x.forEach((x, i) => { ys[at.get(x)] = s.y[i]; });
        data.push(ys);
        series.push({
          label: s.label, stroke: colours[k], width: 2, spanGaps: true,
          paths: uPlot.paths.stepped({ align: 1 }), points: { show: false },
          value: (u, v) => v == null ? "" : count(v),
        });
      });
      const marks = d.map((s, k) => [s.ttft_ms, colours[k]]).filter(([v]) => v != null);
      const ttftLines = (u) => {
        const ctx = u.ctx;
        ctx.save();
        ctx.setLineDash([5 * devicePixelRatio, 4 * devicePixelRatio]);
        ctx.lineWidth = 1.5 * devicePixelRatio;
        for (const [v, colour] of marks) {
          const x = u.valToPos(v, "x", true);
          ctx.strokeStyle = colour;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      };
      return new uPlot(base(el, {
        // from the request on: the TTFTs and the gap before the first character are the point
        scales: { x: { time: false, range: (u, min, max) => [0, max > 0 ? max : 1] } },
        axes: [
          { label: t("ms since the request"), values: (u, vals) => vals.map((v) => dec(v, 6)) },
          { label: t("output characters"), size: 60, values: (u, vals) => vals.map((v) => dec(v, 6)) },
        ],
        series,
        hooks: { draw: [ttftLines] },
      }), data, el);
    },

    // admin: streams and failed streams per day (bars)
    daily(el, d) {
      const x = timeX();
      const data = [d.t, d.streams, d.failed];
      return new uPlot(base(el, {
        tzDate: x.tzDate,
        axes: [x.axis, { label: t("streams"), values: (u, vals) => vals.map((v) => dec(v, 6)) }],
        series: [
          x.series,
          { label: t("streams"), stroke: ACCENT, fill: alpha(ACCENT, 0.5), paths: uPlot.paths.bars({ size: [0.7, 60] }), points: { show: false },
            value: (u, v) => v == null ? "" : count(v) },
          { label: t("failed"), stroke: FAILED, width: 2, points: { show: isolated(d.failed), size: 7, fill: FAILED },
            value: (u, v) => v == null ? "" : count(v) },
        ],
      }), data, el);
    },
  };

  function draw(root) {
    readColours();
    root.querySelectorAll("[data-chart]").forEach((el) => {
      if (el._uplot || typeof uPlot === "undefined") return;
      const build = builders[el.dataset.chart];
      const d = readJSON(el.dataset.source);
      if (!build || d == null) return;
      el._uplot = build(el, d);
    });
  }

  function resize() {
    document.querySelectorAll("[data-chart]").forEach((el) => {
      if (el._uplot) el._uplot.setSize({ width: Math.max(el.clientWidth, 240), height: HEIGHT });
    });
  }

  // another theme: every chart again, in its colours
  onThemeChange(() => {
    document.querySelectorAll("[data-chart]").forEach((el) => {
      el._uplot?.destroy();
      el._uplot = null;
    });
    draw(document);
  });

  let openDetails = [];
  document.addEventListener("htmx:beforeSwap", (e) => {
    openDetails = Array.from(document.querySelectorAll("details[id][open]")).map((d) => d.id);
    swappedData = {};
    if (!e.detail.shouldSwap || !e.detail.serverResponse) return;
    const doc = new DOMParser().parseFromString(e.detail.serverResponse, "text/html");
    doc.querySelectorAll('script[type="application/json"][id]').forEach((s) => {
      swappedData[s.id] = s.textContent;
    });
  });
  document.addEventListener("htmx:afterSettle", () => {
    for (const id of openDetails) {
      const d = document.getElementById(id);
      if (d) d.open = true;
    }
    draw(document);
  });

  let timer = null;
  window.addEventListener("resize", () => {
    clearTimeout(timer);
    timer = setTimeout(resize, 150);
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", () => draw(document));
  } else {
    draw(document);
  }
})();
