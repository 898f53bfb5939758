/**
 * stream_detail.js — the timeline of one stream: live while it streams, replayable after.
 *
 * The page is server-rendered; this module adds what needs a client:
 * - Live: follows /ws/streams/<id>/ (JSON frames; streamclient.js resumes with after=) and
 *   rebuilds the output from the events as they arrive (one renderer for text parts, tool
 *   calls, refusals and reasoning), appends points to the chart, rows to the event table, and
 *   updates status and figures. When the stream ends, the server's rendering of the summary
 *   and output replaces the live one (it adds what only the whole stream knows: rewrite
 *   diffs, findings, final figures).
 * - The inter-event timing chart (uPlot) from /streams/<id>/timing.json.
 * - The event table: a scroll box of windows of 200 rows loaded by index range (never the
 *   whole stream in the DOM), jump to an event, filter by type, rows open to their data.
 * - Replay of a finished stream at 1×, 10× or max speed from the recorded receipt times,
 *   through the same renderer as live.
 *
 * Everything a model or upstream sent is put in the page with textContent or as text nodes.
 * HTML is only ever parsed from this server's own template fragments, which escape it.
 */
import { connectStream } from "./streamclient.js";

const config = JSON.parse(document.getElementById("timeline-config").textContent);
const OUTPUT_TYPES = new Set(config.outputTypes || []);
const TERMINAL = (status) => status !== "pending" && status !== "streaming";

// ---- formatting (as dashboard/templatetags/inspection.py) ------------------------------------

const thin = (s) => s.replace(/,/g, "\u202f");

function fmtMs(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  const a = Math.abs(v);
  if (a < 10) return v.toFixed(2);
  if (a < 1000) return v.toFixed(1);
  return thin(Math.round(v).toLocaleString("en-US"));
}

/** A gap between events for prose: µs below a millisecond. */
function fmtGap(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return `${Math.round(v * 1000)} µs`;
  return `${fmtMs(v)} ms`;
}

function fmtDuration(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1000) return `${Math.round(v)} ms`;
  const s = v / 1000;
  if (s < 60) return `${s.toFixed(2)} s`;
  const total = Math.round(s);
  return `${Math.floor(total / 60)} min ${String(total % 60).padStart(2, "0")} s`;
}

function fmtCount(v) {
  if (v === null || v === undefined) return "—";
  return thin(Number(v).toLocaleString("en-US"));
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function pretty(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** Parse one of this server's template fragments (escaped by Django) into nodes. */
function fragment(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = html;
  return tpl.content;
}

async function getText(url, target) {
  const headers = target ? { "HX-Request": "true", "HX-Target": target } : {};
  const response = await fetch(url, { headers, credentials: "same-origin" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}

// ---- the output renderer: events in, the response as it reads so far -------------------------

const TEXT_DELTAS = new Set(["response.output_text.delta", "response.refusal.delta"]);
const ARG_DELTAS = new Set([
  "response.function_call_arguments.delta",
  "response.custom_tool_call_input.delta",
  "response.mcp_call_arguments.delta",
  "response.code_interpreter_call_code.delta",
]);
const TOOL_ITEMS = new Set(["function_call", "custom_tool_call", "mcp_call"]);
const FAILED = new Set(["failed", "incomplete", "cancelled"]);

class OutputRenderer {
  constructor(container) {
    this.container = container;
    this.items = new Map();
    this.pending = new Map(); // Text node -> chunks not yet in the DOM
    this.growing = null;
    this.seen = new Set(); // sequence numbers applied
  }

  reset() {
    this.container.replaceChildren();
    this.items.clear();
    this.pending.clear();
    this.seen.clear();
    this.growing = null;
  }

  item(oi, type) {
    const key = Number.isInteger(oi) ? oi : 0;
    let rec = this.items.get(key);
    if (rec) return rec;
    this.container.querySelector(".empty-output")?.remove();
    rec = { type, parts: new Map(), summary: new Map() };
    if (TOOL_ITEMS.has(type)) {
      rec.el = el("article", "item tool");
      const head = el("div", "item-head");
      rec.kind = el("span", "kind", type);
      rec.name = el("strong", "mono tool-name", "");
      rec.status = el("span", "badge tool-status", "in progress");
      rec.callId = el("span", "muted small mono", "");
      head.append(rec.kind, " ", rec.name, " ", rec.status, " ", rec.callId);
      const body = el("div", "tool-body");
      const args = el("div");
      rec.args = el("pre", "args");
      rec.argsText = document.createTextNode("");
      rec.args.append(rec.argsText);
      args.append(el("div", "part-label", "Arguments"), rec.args);
      const out = el("div");
      rec.output = el("pre", "tool-output", "(pending)");
      out.append(el("div", "part-label", "Output"), rec.output);
      body.append(args, out);
      rec.el.append(head, body);
    } else if (type === "reasoning") {
      rec.el = el("article", "item reasoning");
      const head = el("div", "item-head");
      head.append(el("span", "kind", "reasoning"));
      rec.el.append(head);
    } else if (type === "message") {
      rec.el = el("article", "item message");
    } else {
      rec.el = el("article", "item other");
      const head = el("div", "item-head");
      head.append(el("span", "kind", type || "item"));
      rec.statusText = el("span", "muted small", "");
      head.append(" ", rec.statusText);
      rec.el.append(head);
    }
    rec.el.dataset.oi = String(key);
    // Items appear in output_index order, whatever order their first events arrive in.
    const after = [...this.items.keys()].filter((k) => k < key).sort((a, b) => b - a)[0];
    if (after === undefined) this.container.prepend(rec.el);
    else this.items.get(after).el.after(rec.el);
    this.items.set(key, rec);
    return rec;
  }

  part(oi, ci, kind) {
    const rec = this.item(oi, "message");
    const key = Number.isInteger(ci) ? ci : 0;
    let part = rec.parts.get(key);
    if (part) return part;
    part = { el: el("div", `part part-${kind}`) };
    part.el.dataset.part = `${oi ?? 0}:${key}`;
    if (kind === "refusal") part.el.append(el("div", "part-label refusal-label", "Refusal"));
    part.box = el("div", "text");
    part.text = document.createTextNode("");
    part.box.append(part.text);
    part.el.append(part.box);
    const later = [...rec.parts.keys()].filter((k) => k > key).sort((a, b) => a - b)[0];
    if (later === undefined) rec.el.append(part.el);
    else rec.parts.get(later).el.before(part.el);
    rec.parts.set(key, part);
    return part;
  }

  reasoning(oi, index, label) {
    const rec = this.item(oi, "reasoning");
    const key = `${label}:${index ?? 0}`;
    let part = rec.summary.get(key);
    if (!part) {
      part = { box: el("div", "text reasoning-text") };
      part.text = document.createTextNode("");
      part.box.append(part.text);
      rec.el.append(part.box);
      rec.summary.set(key, part);
    }
    return part;
  }

  append(textNode, box, chunk) {
    if (!chunk) return;
    const chunks = this.pending.get(textNode);
    if (chunks) chunks.push(chunk);
    else this.pending.set(textNode, [chunk]);
    if (this.growing !== box) {
      this.growing?.classList.remove("growing");
      this.growing = box;
      box.classList.add("growing");
    }
  }

  /** Write buffered deltas: one DOM change per text per frame, however many deltas came. */
  flush() {
    for (const [node, chunks] of this.pending) node.appendData(chunks.join(""));
    this.pending.clear();
  }

  finish() {
    this.flush();
    this.growing?.classList.remove("growing");
    this.growing = null;
  }

  apply(obj) {
    if (!obj || typeof obj !== "object") return;
    // A repeated sequence_number is a duplicate delivery: the checker ignores it, so do we.
    const seq = obj.sequence_number;
    if (Number.isInteger(seq)) {
      if (this.seen.has(seq)) return;
      this.seen.add(seq);
    }
    const t = obj.type;
    if (TEXT_DELTAS.has(t)) {
      const kind = t === "response.refusal.delta" ? "refusal" : "output_text";
      const part = this.part(obj.output_index, obj.content_index, kind);
      this.append(part.text, part.box, typeof obj.delta === "string" ? obj.delta : "");
    } else if (ARG_DELTAS.has(t)) {
      const rec = this.item(obj.output_index, "function_call");
      if (rec.argsText) this.append(rec.argsText, rec.args, String(obj.delta ?? ""));
    } else if (t === "response.reasoning_summary_text.delta") {
      const part = this.reasoning(obj.output_index, obj.summary_index, "summary");
      this.append(part.text, part.box, String(obj.delta ?? ""));
    } else if (t === "response.reasoning_text.delta") {
      const part = this.reasoning(obj.output_index, obj.content_index, "text");
      this.append(part.text, part.box, String(obj.delta ?? ""));
    } else if (t === "response.output_item.added" || t === "response.output_item.done") {
      const item = obj.item && typeof obj.item === "object" ? obj.item : {};
      const rec = this.item(obj.output_index, item.type || "message");
      this.describe(rec, item, t === "response.output_item.done");
    } else if (t === "response.content_part.added") {
      const part = obj.part && typeof obj.part === "object" ? obj.part : {};
      this.part(obj.output_index, obj.content_index, part.type === "refusal" ? "refusal" : "output_text");
    } else if (
      t === "response.function_call_arguments.done" &&
      typeof obj.arguments === "string"
    ) {
      const rec = this.item(obj.output_index, "function_call");
      if (rec.argsText) this.replace(rec.argsText, pretty(obj.arguments));
    }
  }

  replace(textNode, text) {
    this.pending.delete(textNode);
    textNode.data = text;
  }

  describe(rec, item, done) {
    if (rec.name) {
      if (item.name) rec.name.textContent = item.name;
      if (item.call_id) rec.callId.textContent = item.call_id;
      if (item.status || done) {
        const status = item.status || "done";
        rec.status.textContent = status;
        rec.status.className = `badge tool-status ${FAILED.has(status) ? "failed" : status}`;
        rec.el.classList.toggle("failed", FAILED.has(status));
      }
      if (done && typeof item.arguments === "string" && item.arguments) {
        this.replace(rec.argsText, pretty(item.arguments));
      }
      if ("output" in item && item.output !== null && item.output !== undefined) {
        rec.output.textContent = pretty(item.output);
      } else if (done) {
        rec.output.textContent = "(none)";
      }
    } else if (rec.statusText && item.status) {
      rec.statusText.textContent = item.status;
    }
  }
}

// ---- figures and status ------------------------------------------------------------------------

const FORMAT = {
  ttft_ms: fmtMs,
  duration_ms: fmtDuration,
  event_count: fmtCount,
  output_tokens: fmtCount,
  findings_count: fmtCount,
  tokens_per_s: (v) => (v === null || v === undefined ? "—" : v.toFixed(1)),
};

function setFields(fields) {
  for (const [name, value] of Object.entries(fields || {})) {
    const format = FORMAT[name] || ((v) => (v === null || v === undefined || v === "" ? "—" : String(v)));
    for (const node of document.querySelectorAll(`[data-field="${name}"]`)) {
      node.textContent = format(value);
    }
  }
}

function setStatus(status) {
  const badge = document.getElementById("stream-status");
  if (!badge || !status) return;
  badge.textContent = status;
  badge.dataset.status = status;
  badge.className = `badge big ${status}`;
}

let liveState = ["off", ""];

function setLive(state, text) {
  liveState = [state, text];
  const node = document.getElementById("live-state");
  if (!node) return;
  node.dataset.state = state;
  node.textContent = text;
}

// ---- the inter-event timing chart --------------------------------------------------------------

const MIN_GAP_MS = 0.001;
const DENSE = 2000; // points above which the chart draws its own dots

/** A points-only series. Dense ones draw square dots straight onto the canvas, one per
 * distinct pixel: uPlot's own points are arcs, which took ~1 s for 100 000 events. */
function dotSeries(label, color, size, dense) {
  const series = { label, stroke: color, fill: color, value: (u, v) => (v === null ? "—" : `${fmtMs(v)} ms`) };
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
/** The gap axis's range: whole decades with room above and below, so dots on the extremes
 * are not cut by the frame. uPlot's log splits need decade ends: from 0.0952 they stepped
 * 0.11, 0.22 → rounded to 0 and looped until "Invalid array length" (in a microtask, so no
 * try/catch of ours saw it). No gap yet (a live stream's first event) gives a fixed range. */
function logRange(min, max) {
  if (!(Number.isFinite(min) && Number.isFinite(max) && max > 0)) return [1e-3, 1e3];
  const exponent = (v, snap) => {
    const e = Math.log10(v);
    return Math.abs(e - Math.round(e)) < 1e-9 ? Math.round(e) : snap(e);
  };
  const lo = Math.max(exponent(Math.max(min, MIN_GAP_MS), Math.ceil) - 1, -4);
  const hi = exponent(Math.max(max, MIN_GAP_MS), Math.floor) + 1;
  return [Number(`1e${lo}`), Number(`1e${hi}`)];
}
const decades = (u, splits) => splits.map((v) => (Math.abs(Math.log10(v) % 1) < 1e-9 ? v : null)); // a log scale needs positive values: 1 µs stands for "same instant"

class TimingChart {
  constructor() {
    this.box = document.getElementById("timing-chart");
    this.caption = document.getElementById("timing-caption");
    this.table = document.getElementById("timing-table");
    this.reset();
    this.plot = null;
    this.replayMs = null;
    this.pendingDraw = 0;
    if (this.box) new ResizeObserver(() => this.resize()).observe(this.box);
  }

  reset() {
    this.xs = []; // seconds since the attempt started
    this.out = []; // gap (ms) of output deltas, else null
    this.other = []; // gap (ms) of other events, else null
    this.indexes = [];
    this.lastUs = 0;
    this.marks = [];
    this.silence = null;
  }

  push(index, tUs, isOutput) {
    if (tUs === null || tUs === undefined) return;
    const gap = Math.max((tUs - this.lastUs) / 1000, MIN_GAP_MS);
    this.lastUs = tUs;
    this.xs.push(tUs / 1e6);
    this.out.push(isOutput ? gap : null);
    this.other.push(isOutput ? null : gap);
    this.indexes.push(index);
  }

  load(data) {
    this.reset();
    if (!data.timed) {
      this.caption.textContent =
        "This stream has no receipt times (an imported .sse file keeps none): nothing to chart.";
      this.box.hidden = true;
      return;
    }
    const types = data.types || [];
    const output = new Set(data.output_types || []);
    const isOut = types.map((t) => output.has(t));
    let t = 0;
    const gaps = data.gap_us;
    for (let i = 0; i < gaps.length; i++) {
      t += gaps[i];
      this.push(data.index ? data.index[i] : data.first + i, t, isOut[data.kind[i]]);
    }
    this.marks = data.marks || [];
    // A stalled attempt ends in silence: chart it up to the close, as a band.
    if (data.status === "stalled" && data.closed_us && data.closed_us > t) {
      this.xs.push(data.closed_us / 1e6);
      this.out.push(null);
      this.other.push(null);
      this.indexes.push(null);
      this.silence = [t / 1e6, data.closed_us / 1e6];
    }
    this.draw(true);
    this.describe(data);
  }

  describe(data) {
    const s = data.stats;
    if (!s) {
      this.caption.textContent = `${fmtCount(data.count)} events: too few to chart gaps.`;
      return;
    }
    const stalls = this.marks.filter((m) => m.code === "stall").length;
    const bursts = this.marks.filter((m) => m.code === "buffered_delivery").length;
    const longest = s.longest[0];
    let text =
      `${fmtCount(data.count)} events over ${fmtDuration(s.duration_ms)}. ` +
      `Time since the previous event: median ${fmtGap(s.median_ms)}, ` +
      `90th percentile ${fmtGap(s.p90_ms)}, 99th ${fmtGap(s.p99_ms)}, ` +
      `longest ${fmtGap(s.max_ms)} (before event ${longest.index}). `;
    if (stalls || bursts) {
      text += `Marked: ${stalls} stall${stalls === 1 ? "" : "s"} (red bands) and ${bursts} ` +
        `buffered burst${bursts === 1 ? "" : "s"} (amber lines). `;
    } else {
      text += "No stall or buffered burst was flagged. ";
    }
    if (this.silence) {
      const quiet = (this.silence[1] - this.silence[0]) * 1000;
      text += `After the last event nothing came for ${fmtDuration(quiet)}, until the stall ` +
        "timeout aborted the attempt (red band at the end). ";
    }
    text += "Blue: output deltas; grey: other events. Drag to zoom, double-click to reset, " +
      "click a point to open its event.";
    this.caption.textContent = text;
    const body = this.table.querySelector("tbody");
    body.replaceChildren();
    for (const row of s.longest) {
      const tr = el("tr");
      const cell = el("td", "num");
      const button = el("button", "ev-open", String(row.index));
      button.type = "button";
      button.addEventListener("click", () => jumpTo(row.index));
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
    this.caption.textContent =
      `Live: ${fmtCount(this.xs.length)} events over ${fmtDuration(this.xs.at(-1) * 1000)} so far; ` +
      `longest pause ${fmtGap(max)} (before event ${at}).`;
  }

  options() {
    const marks = this;
    const dense = this.xs.length > DENSE;
    return {
      width: Math.max(300, this.box.clientWidth),
      height: 240,
      scales: {
        // one point (min === max), or none yet, must not give uPlot an empty or NaN range
        x: { time: false, range: (u, min, max) =>
          !(Number.isFinite(min) && Number.isFinite(max)) ? [0, 1]
            : min === max ? [Math.max(0, min - 0.5), max + 0.5] : [min, max] },
        y: { distr: 3, log: 10, range: (u, min, max) => logRange(min, max) },
      },
      legend: { live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 7 } },
      axes: [
        { label: "seconds since the request", labelSize: 20, size: 34, space: 60,
          values: (u, ticks) => ticks.map((v) => (v === null ? "" : `${+v.toFixed(3)}`)) },
        { label: "ms since previous event", labelSize: 20, size: 56,
          // powers of ten only: the log scale's minor splits made a striped background
          filter: decades, grid: { filter: decades }, ticks: { filter: decades },
          values: (u, ticks) =>
            ticks.map((v) => (v === null ? "" : v >= 1000 ? fmtCount(v) : `${+v.toPrecision(3)}`)) },
      ],
      series: [
        { label: "t (s)", value: (u, v) => (v === null ? "—" : v.toFixed(4)) },
        dotSeries("output delta", "#2f7fd6", dense ? 3 : 5, dense),
        dotSeries("other event", "#8b95a7", dense ? 4 : 6, dense),
      ],
      hooks: { draw: [(u) => marks.drawMarks(u)] },
    };
  }

  drawMarks(u) {
    const ctx = u.ctx;
    const { top, height } = u.bbox;
    ctx.save();
    ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
    ctx.textAlign = "left"; // uPlot leaves its axes' alignment on the context
    ctx.textBaseline = "alphabetic";
    for (const mark of this.marks) {
      const i = this.position(mark.event_index);
      if (i < 0) continue;
      const x = u.valToPos(this.xs[i], "x", true);
      if (mark.code === "stall") {
        const x0 = u.valToPos(i > 0 ? this.xs[i - 1] : 0, "x", true);
        ctx.fillStyle = "rgba(179, 38, 30, 0.13)";
        ctx.fillRect(x0, top, Math.max(x - x0, 2), height);
        ctx.fillStyle = "#b3261e";
        ctx.fillText("stall", x0 + 4, top + 12 * devicePixelRatio);
      } else {
        ctx.strokeStyle = "rgba(224, 161, 0, 0.9)";
        ctx.lineWidth = 2 * devicePixelRatio;
        ctx.beginPath();
        ctx.moveTo(x, top);
        ctx.lineTo(x, top + height);
        ctx.stroke();
        ctx.fillStyle = "#a15c00";
        ctx.fillText("burst", x + 3, top + 24 * devicePixelRatio);
      }
    }
    if (this.silence) {
      const [x0, x1] = this.silence.map((v) => u.valToPos(v, "x", true));
      ctx.fillStyle = "rgba(179, 38, 30, 0.13)";
      ctx.fillRect(x0, top, Math.max(x1 - x0, 2), height);
      ctx.fillStyle = "#b3261e";
      ctx.fillText("no event until the stall timeout: aborted", x0 + 4, top + 12 * devicePixelRatio);
    }
    if (this.replayMs !== null) {
      const x = u.valToPos(this.replayMs / 1000, "x", true);
      ctx.strokeStyle = "#141a26";
      ctx.lineWidth = 1.5 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x, top);
      ctx.lineTo(x, top + height);
      ctx.stroke();
    }
    ctx.restore();
  }

  /** Position of an event index in the arrays (indexes ascend). */
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
    return -1;
  }

  data() {
    return [this.xs, this.out, this.other].map((values) =>
      values.map((v) => (Number.isFinite(v) ? v : null)),
    );
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
    this.plot = new window.uPlot(this.options(), this.data(), this.box);
    let down = null;
    this.plot.over.addEventListener("mousedown", (e) => (down = [e.clientX, e.clientY]));
    this.plot.over.addEventListener("click", (e) => {
      const moved = down && Math.hypot(e.clientX - down[0], e.clientY - down[1]) > 3;
      const i = this.plot.cursor.idx;
      const index = i === null || i === undefined ? null : this.indexes[i];
      if (!moved && index !== null && index !== undefined) jumpTo(index);
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

// ---- the event table: windows of rows by index range --------------------------------------------

const MAX_ROWS = 1000; // rows kept in the DOM; the far end is dropped and reloads on scroll

class EventTable {
  constructor() {
    this.scroll = document.getElementById("events-scroll");
    this.table = this.scroll.querySelector("table");
    this.body = document.getElementById("events-body");
    this.typeSelect = document.getElementById("event-type");
    this.range = document.getElementById("events-range");
    this.loading = null;
    this.live = false;
    this.readState(this.body);
    this.top = el("div", "window-edge");
    this.bottom = el("div", "window-edge");
    this.top.setAttribute("aria-hidden", "true");
    this.bottom.setAttribute("aria-hidden", "true");
    this.scroll.prepend(this.top);
    this.scroll.append(this.bottom);
    this.scroll.style.overflowAnchor = "none"; // scroll position is kept by hand, below
    const observer = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (!entry.isIntersecting) continue;
          if (entry.target === this.top && this.hasBefore) this.loadBefore();
          if (entry.target === this.bottom && this.hasAfter) this.loadAfter();
        }
      },
      { root: this.scroll, rootMargin: "400px 0px" },
    );
    observer.observe(this.top);
    observer.observe(this.bottom);
    document.querySelector(".events-pager")?.querySelectorAll("a").forEach((a) => (a.hidden = true));
    this.bindControls();
    this.updateRange();
    const target = this.body.querySelector("tr.target");
    if (target) requestAnimationFrame(() => this.reveal(target, true));
  }

  readState(body) {
    const d = body.dataset;
    this.first = d.first === "" ? null : Number(d.first);
    this.last = d.last === "" ? null : Number(d.last);
    this.hasBefore = d.hasBefore === "1";
    this.hasAfter = d.hasAfter === "1";
    this.type = d.type || "";
  }

  bindControls() {
    const form = document.getElementById("events-filter");
    const at = document.getElementById("event-at");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (at.value !== "") jumpTo(Number(at.value));
      else this.replace({ type: this.typeSelect.value });
    });
    this.typeSelect.addEventListener("change", () => this.replace({ type: this.typeSelect.value }));
    document.getElementById("events-first").addEventListener("click", (event) => {
      event.preventDefault();
      this.replace({ type: this.typeSelect.value });
    });
    document.getElementById("events-last").addEventListener("click", (event) => {
      event.preventDefault();
      this.replace({ type: this.typeSelect.value, tail: "1" }).then(() => {
        this.scroll.scrollTop = this.scroll.scrollHeight;
      });
    });
    this.body.addEventListener("click", (event) => {
      const row = event.target.closest("tr.event");
      if (!row || event.target.closest("a")) return;
      this.toggle(row);
    });
  }

  url(params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) query.set(k, v);
    return `${config.urls.events}?${query}`;
  }

  async fetchWindow(params) {
    const html = await getText(this.url(params));
    return fragment(html).querySelector("tbody");
  }

  rows() {
    return this.body.querySelectorAll("tr.event");
  }

  /** Replace the table with a new window (filter, first, last, jump). */
  async replace(params) {
    const body = await this.fetchWindow(params);
    this.body.replaceChildren(...body.childNodes);
    this.readState(body);
    this.body.dataset.type = this.type;
    this.typeSelect.value = this.type;
    this.scroll.scrollTop = 0;
    this.updateRange();
    return body;
  }

  async loadAfter() {
    if (this.loading || this.last === null) {
      if (this.last === null && !this.loading && this.live) return this.replace({ type: this.type, tail: "1" });
      return;
    }
    this.loading = "after";
    try {
      const atBottom = this.scroll.scrollHeight - this.scroll.scrollTop - this.scroll.clientHeight < 40;
      const body = await this.fetchWindow({ after: this.last, type: this.type });
      const rows = [...body.querySelectorAll("tr.event")].filter((r) => Number(r.dataset.index) > this.last);
      if (rows.length) {
        this.body.querySelector("tr.no-events")?.remove();
        this.body.append(...rows);
        this.last = Number(rows.at(-1).dataset.index);
        if (this.first === null) this.first = Number(rows[0].dataset.index);
      }
      this.hasAfter = body.dataset.hasAfter === "1";
      this.prune("top");
      if (atBottom && this.live) this.scroll.scrollTop = this.scroll.scrollHeight;
      this.updateRange();
    } finally {
      this.loading = null;
    }
    if (this.hasAfter && this.visible(this.bottom)) this.loadAfter();
  }

  async loadBefore() {
    if (this.loading || this.first === null) return;
    this.loading = "before";
    try {
      const body = await this.fetchWindow({ before: this.first, type: this.type });
      const rows = [...body.querySelectorAll("tr.event")].filter((r) => Number(r.dataset.index) < this.first);
      if (rows.length) {
        const height = this.scroll.scrollHeight;
        this.body.prepend(...rows);
        this.scroll.scrollTop += this.scroll.scrollHeight - height;
        this.first = Number(rows[0].dataset.index);
      }
      this.hasBefore = body.dataset.hasBefore === "1";
      this.prune("bottom");
      this.updateRange();
    } finally {
      this.loading = null;
    }
  }

  /** Drop rows beyond MAX_ROWS from the far end, keeping what is on screen where it is. */
  prune(end) {
    const rows = this.rows();
    const extra = rows.length - MAX_ROWS;
    if (extra <= 0) return;
    if (end === "top") {
      const height = this.scroll.scrollHeight;
      for (let i = 0; i < extra; i++) {
        rows[i].nextElementSibling?.classList.contains("event-detail") && rows[i].nextElementSibling.remove();
        rows[i].remove();
      }
      this.scroll.scrollTop -= height - this.scroll.scrollHeight;
      this.first = Number(this.rows()[0].dataset.index);
      this.hasBefore = true;
    } else {
      for (let i = rows.length - extra; i < rows.length; i++) {
        rows[i].nextElementSibling?.classList.contains("event-detail") && rows[i].nextElementSibling.remove();
        rows[i].remove();
      }
      this.last = Number(this.rows()[this.rows().length - 1].dataset.index);
      this.hasAfter = true;
    }
  }

  visible(node) {
    const a = node.getBoundingClientRect();
    const b = this.scroll.getBoundingClientRect();
    return a.top < b.bottom + 400 && a.bottom > b.top - 400;
  }

  updateRange() {
    if (!this.range) return;
    const n = this.rows().length;
    const more = this.hasBefore || this.hasAfter ? " · scroll for more" : "";
    this.range.textContent = n
      ? `showing events ${this.first}–${this.last}${this.type ? ` (${this.type} only)` : ""}${more}`
      : "";
  }

  /** Show an event: the window around it, scrolled to and highlighted. */
  async jump(index) {
    let row = document.getElementById(`ev-${index}`);
    if (!row || this.type) {
      await this.replace({ at: index });
      row = document.getElementById(`ev-${index}`);
    }
    if (!row) return;
    this.reveal(row, true);
  }

  reveal(row, highlight) {
    for (const old of this.body.querySelectorAll("tr.target")) old.classList.remove("target");
    this.scroll.closest("section").scrollIntoView({ block: "start" });
    this.scroll.scrollTop = row.offsetTop - this.scroll.clientHeight / 3;
    if (highlight) {
      row.classList.add("target");
      row.querySelector("button")?.focus({ preventScroll: true });
    }
  }

  async toggle(row) {
    const button = row.querySelector(".ev-open");
    const next = row.nextElementSibling;
    if (next && next.classList.contains("event-detail")) {
      next.remove();
      row.classList.remove("open");
      button?.setAttribute("aria-expanded", "false");
      return;
    }
    const html = await getText(`${config.urls.event}${row.dataset.index}/`);
    const detail = fragment(html).querySelector("tr");
    if (!detail || !row.isConnected) return;
    row.after(detail);
    row.classList.add("open");
    button?.setAttribute("aria-expanded", "true");
  }

  /** Live: new events were stored; follow them if the table shows the end. */
  noteNewEvents() {
    if (this.hasAfter || this.pendingTail) return;
    this.pendingTail = setTimeout(() => {
      this.pendingTail = 0;
      this.loadAfter();
    }, 300);
  }
}

// ---- replay ---------------------------------------------------------------------------------------

const UNTIMED_STEP_US = 10_000; // imports keep no receipt times: replay them at 10 ms an event

class Replay {
  constructor(renderer, chart) {
    this.renderer = renderer;
    this.chart = chart;
    this.data = null;
    this.frame = 0;
    this.bind();
  }

  /** (Re)attach to the controls: a live page re-renders the header that holds them. */
  bind() {
    this.button = document.getElementById("replay-btn");
    this.speed = document.getElementById("replay-speed");
    this.state = document.getElementById("replay-state");
    this.container = document.getElementById("output-items");
    if (this.button && !this.button.dataset.bound) {
      this.button.dataset.bound = "1";
      this.button.addEventListener("click", () => (this.frame ? this.stop("stopped") : this.start()));
    }
  }

  async start() {
    this.button.disabled = true;
    try {
      this.data ??= JSON.parse(await getText(config.urls.replay));
    } finally {
      this.button.disabled = false;
    }
    const { events, targets } = this.data;
    if (!events.length) {
      this.state.textContent = "nothing to replay";
      return;
    }
    this.container = document.getElementById("output-items");
    this.saved = [...this.container.childNodes];
    this.renderer.container = this.container;
    this.renderer.reset();
    const timed = this.data.timed;
    const times = events.map((e, i) => (timed ? e[0] : i * UNTIMED_STEP_US));
    const t0 = times[0];
    const speed = Number(this.speed.value);
    const span = times.at(-1) - t0;
    const perFrame = Math.max(20, Math.ceil(events.length / 90)); // max speed: ~1.5 s of frames
    let i = 0;
    const started = performance.now();
    this.button.textContent = "■ Stop";
    this.button.classList.add("playing");
    const step = () => {
      const elapsedUs = (performance.now() - started) * 1000;
      const limit = speed ? t0 + elapsedUs * speed : Infinity;
      const stop = speed ? events.length : Math.min(events.length, i + perFrame);
      while (i < stop && times[i] <= limit) {
        const e = events[i];
        if (e.length === 3) {
          const [type, oi, ci, si] = targets[e[1]];
          this.renderer.apply({ type, output_index: oi, content_index: ci, summary_index: si, delta: e[2] });
        } else {
          this.renderer.apply(e[1]);
        }
        i++;
      }
      this.renderer.flush();
      const at = times[Math.max(0, i - 1)];
      if (timed) this.chart.setReplay(at / 1000);
      this.state.textContent =
        `replaying at ${speed ? `${speed}×` : "max speed"}: ${fmtDuration((at - t0) / 1000)} of ` +
        `${fmtDuration(span / 1000)}${timed ? "" : " (no recorded timing: 10 ms an event)"}`;
      if (i < events.length) this.frame = requestAnimationFrame(step);
      else this.stop("finished", performance.now() - started);
    };
    this.frame = requestAnimationFrame(step);
  }

  stop(how, wallMs) {
    cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.renderer.finish();
    // The final rendering (with rewrite diffs and everything only the whole stream shows).
    this.container.replaceChildren(...this.saved);
    this.chart.setReplay(null);
    this.button.textContent = "▶ Replay";
    this.button.classList.remove("playing");
    this.state.textContent =
      how === "finished" ? `replay finished in ${fmtDuration(wallMs)}` : "replay stopped";
  }
}

// ---- the page --------------------------------------------------------------------------------

const chart = new TimingChart();
const table = new EventTable();
const renderer = new OutputRenderer(document.getElementById("output-items"));
const replay = new Replay(renderer, chart);

function jumpTo(index) {
  table.jump(index);
}

// Long texts come with their tail in an inert <template>, laid out only on demand.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.show-rest");
  if (!button) return;
  const text = button.previousElementSibling;
  const rest = text?.querySelector("template.text-rest");
  if (rest) {
    text.append(rest.content.textContent);
    rest.remove();
  }
  button.remove();
});

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-jump]");
  if (!link) return;
  event.preventDefault();
  jumpTo(Number(link.dataset.jump));
  history.replaceState(null, "", `?at=${link.dataset.jump}`);
});

async function loadChart() {
  try {
    performance.mark("timing-fetch");
    const data = JSON.parse(await getText(config.urls.timing));
    performance.mark("timing-loaded");
    chart.load(data);
    performance.measure("timing-fetch", "timing-fetch", "timing-loaded");
    performance.measure("timing-draw", "timing-loaded");
  } catch (error) {
    chart.caption.textContent = `The timing could not be loaded (${error.message}).`;
  }
}

/** Replace parts of the page with the server's rendering of them (the summary: header,
 * figures, milestones, findings; with `output`, the output too — once the stream ended, it
 * adds what only the whole stream knows: rewrite diffs, final tool states). */
let refreshSeq = 0;

async function refresh({ output = false, attempt = 0 } = {}) {
  const seq = ++refreshSeq;
  const html = await getText(config.urls.page);
  if (seq !== refreshSeq) return; // a later refresh (the final one) wins
  const doc = new DOMParser().parseFromString(html, "text/html");
  for (const id of output ? ["stream-summary", "output"] : ["stream-summary"]) {
    const fresh = doc.getElementById(id);
    const old = document.getElementById(id);
    if (fresh && old) old.replaceWith(document.importNode(fresh, true));
  }
  setLive(liveState[0], liveState[1]);
  const select = doc.getElementById("event-type");
  if (select) {
    const value = table.typeSelect.value;
    table.typeSelect.replaceChildren(...[...select.options].map((o) => document.importNode(o, true)));
    table.typeSelect.value = value;
  }
  replay.bind();
  renderer.container = document.getElementById("output-items");
  const status = document.getElementById("stream-status")?.dataset.status;
  // A stall retry is created just after the stalled attempt ends: look again for its link.
  if (status === "stalled" && !document.querySelector(".retry-link") && attempt < 6) {
    setTimeout(() => refresh({ attempt: attempt + 1 }), 500 * (attempt + 1));
  }
}

// Fields whose change is worth re-rendering the summary while live (milestones, findings).
const SUMMARY_FIELDS = /_us$|^findings_count$|^resolved_model$|^routing_|^error_|^http_status$/;
const SUMMARY_EVERY_MS = 1500;
let summaryTimer = 0;
let summaryAt = 0;

let followEnded = false;

function scheduleSummary() {
  if (summaryTimer || followEnded) return;
  const wait = Math.max(0, summaryAt + SUMMARY_EVERY_MS - performance.now());
  summaryTimer = setTimeout(async () => {
    summaryAt = performance.now();
    try {
      await refresh();
    } finally {
      summaryTimer = 0;
    }
  }, wait);
}

function follow() {
  let ended = false;
  let outputTokens = 0;
  const end = async () => {
    if (ended) return;
    ended = followEnded = true;
    renderer.finish();
    setLive("off", "");
    clearTimeout(summaryTimer);
    chart.stopLive();
    table.live = false;
    await Promise.allSettled([refresh({ output: true }), loadChart(), table.loadAfter()]);
  };
  connectStream(config.ws, {
    after: -1,
    onOpen: () => setLive("live", "live"),
    onFrame(frame) {
      let added = false;
      for (const e of frame.events || []) {
        let obj = null;
        try {
          obj = JSON.parse(e.data);
        } catch {
          // not JSON: recorded as a finding; nothing to render
        }
        if (obj) renderer.apply(obj);
        const isOutput = OUTPUT_TYPES.has(e.type);
        if (isOutput) outputTokens += 1;
        chart.push(e.index, e.t_us, isOutput);
        added = true;
      }
      requestAnimationFrame(() => renderer.flush());
      if (added && !ended) {
        chart.scheduleDraw();
        table.noteNewEvents();
        // The recorder stores output_tokens when the stream ends; count them meanwhile.
        if (!ended) setFields({ output_tokens: outputTokens });
      }
      if (frame.stream) {
        setFields(frame.stream);
        if (!frame.status && Object.keys(frame.stream).some((k) => SUMMARY_FIELDS.test(k))) {
          scheduleSummary();
        }
      }
      if (frame.status) setStatus(frame.status);
    },
    onStatus(status) {
      if (TERMINAL(status)) end();
    },
    onClose(info) {
      if (info.willRetry) setLive("retrying", "reconnecting…");
    },
    onEnd(info) {
      if (info.reason === "terminal") end();
      else setLive("off", info.reason === "refused" ? "live updates unavailable" : "");
    },
  });
}

if (config.active) {
  table.live = true;
  chart.caption.textContent = "Live: the chart fills in as events arrive.";
  follow();
} else {
  loadChart();
}
