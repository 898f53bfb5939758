/**
 * compare.js — compare mode (templates/dashboard/playground_compare.html): one message to 2–4
 * models at once, their answers side by side, live. An ES module, no build step.
 *
 * The POST starts one stream per model (dashboard/views/playground.py, services.create and
 * start for each) and answers their ids; each column follows its stream's WebSocket like the
 * playground does (streamclient.js, resuming with after=) and renders its output with
 * output.js, written once per animation frame. The figures are the server's (the frames'
 * `stream` fields: TTFT, output deltas/s, duration, event and finding counts, as the timeline
 * shows them); the summary names who was first to the first token and to the end. Findings
 * show their severity as the list does (dashboard/templatetags/inspection.py, finding_pills):
 * errors red, the rest (warnings or info: the frames count errors apart only) grey.
 * Model output reaches the page only through output.js (text, or sanitised Markdown).
 */
import { el } from "./dom.js";
import { LiveOutput } from "./output.js";
import { colorFor } from "./palette.js";
import { connectStream } from "./streamclient.js";
import { isFinished, STATUSES } from "./vocabulary.js";

const fmt = {
  ms: (v) => (typeof v === "number" ? (v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${Math.round(v)} ms`) : ""),
  rate: (v) => (typeof v === "number" ? `${v.toFixed(1)} deltas/s` : ""),
  count: (v) => (typeof v === "number" ? String(v) : ""),
};

/** A stream's findings by severity, from the frames' counts: errors in red, the others
 * (warnings or info, not told apart by the frames) in grey; "0" without any. */
function findingPills(total, errors, warnings) {
  total = typeof total === "number" ? total : 0;
  errors = typeof errors === "number" ? errors : 0;
  if (!total) return [el("span", "muted", "0")];
  const pills = [];
  const pill = (severity, text, title) => {
    const node = el("span", `sev-pill sev-pill-${severity}`, text);
    node.title = title;
    if (pills.length) pills.push(" ");
    pills.push(node);
  };
  if (errors) pill("error", `${errors} err`, `${errors} error finding${errors === 1 ? "" : "s"}: the protocol was broken`);
  if (typeof warnings === "number") {
    if (warnings) pill("warning", `${warnings} warn`, `${warnings} warning${warnings === 1 ? "" : "s"}: something to look at`);
    const info = total - errors - warnings;
    if (info > 0) pill("info", `${info} info`, `${info} info finding${info === 1 ? "" : "s"}: noted, not a fault`);
    return pills;
  }
  const other = total - errors;
  if (other > 0) {
    pill("other", `${other} warn/info`, `${other} finding${other === 1 ? "" : "s"}, no error: warnings or info (the timeline tells them apart)`);
  }
  return pills;
}

class Column {
  constructor(grid, info, onChange) {
    this.info = info;
    this.onChange = onChange;
    this.fields = {};
    this.status = STATUSES.initial;
    this.events = 0;
    this.node = el("article", "card cmp-col");
    this.node.dataset.stream = String(info.id);
    this.node.style.borderTopColor = colorFor(info.model); // the model's colour on every page
    const head = el("div", "cmp-head");
    const title = el("strong", "mono", info.model);
    this.badge = el("span", `badge ${this.status}`, this.status);
    const link = el("a", "pg-timeline", "Timeline →");
    link.href = info.timeline;
    head.append(title, " ", this.badge, link);
    this.figures = el("dl", "cmp-figures");
    this.cells = {};
    for (const [key, label] of [
      ["ttft_ms", "TTFT"],
      ["tokens_per_s", "Deltas/s"],
      ["duration_ms", "Total"],
      ["event_count", "Events"],
      ["findings_count", "Findings"],
    ]) {
      const dd = el("dd", "", "");
      dd.dataset.f = key;
      const dt = el("dt", "", label);
      if (key === "tokens_per_s") dt.title = grid.closest("#compare")?.dataset.helpRate || "";
      this.figures.append(dt, dd);
      this.cells[key] = dd;
    }
    this.routed = el("p", "muted small cmp-routed", "");
    const items = el("div", "items cmp-output");
    this.node.append(head, this.figures, this.routed, items);
    grid.append(this.node);
    this.output = new LiveOutput(items, { playground: true });
    this.scheduled = false;
  }

  start() {
    this.conn = connectStream(this.info.ws, {
      after: -1,
      onFrame: (frame) => this.frame(frame),
      onEnd: () => this.end(),
    });
  }

  frame(frame) {
    for (const e of frame.events || []) {
      this.events += 1;
      try {
        this.output.apply(JSON.parse(e.data));
      } catch {
        // not JSON: the timeline shows it; nothing to render here
      }
    }
    if (!this.scheduled) {
      this.scheduled = true;
      requestAnimationFrame(() => {
        this.scheduled = false;
        this.output.flush();
      });
    }
    if (frame.stream) Object.assign(this.fields, frame.stream);
    if (frame.status) this.status = frame.status;
    this.show();
  }

  show() {
    const f = { ...this.fields };
    if (typeof f.event_count !== "number") f.event_count = this.events;
    this.cells.ttft_ms.textContent = fmt.ms(f.ttft_ms);
    this.cells.tokens_per_s.textContent = fmt.rate(f.tokens_per_s);
    this.cells.duration_ms.textContent = fmt.ms(f.duration_ms);
    this.cells.event_count.textContent = fmt.count(f.event_count);
    this.cells.findings_count.replaceChildren(...findingPills(f.findings_count, f.error_findings, f.warning_findings));
    this.badge.textContent = this.status;
    this.badge.className = `badge ${this.status}`;
    if (f.resolved_model && f.resolved_model !== this.info.model) {
      this.routed.textContent = `routed to ${f.resolved_model}`;
    }
    if (f.error_message) this.routed.textContent = [f.error_code, f.error_message].filter(Boolean).join(": ");
    this.onChange();
  }

  end() {
    this.output.finish();
    this.ended = true;
    this.show();
  }
}

function summary(columns) {
  const text = document.getElementById("cmp-summary-text");
  const box = document.getElementById("cmp-summary");
  const pick = (key) => {
    const ok = columns.filter((c) => typeof c.fields[key] === "number");
    if (!ok.length) return null;
    return ok.reduce((a, b) => (b.fields[key] < a.fields[key] ? b : a));
  };
  const first = pick("ttft_ms");
  const done = columns.filter((c) => c.status === "completed");
  const fastest = done.length
    ? done.reduce((a, b) => ((b.fields.duration_ms ?? Infinity) < (a.fields.duration_ms ?? Infinity) ? b : a))
    : null;
  const parts = [];
  if (first) parts.push(`Fastest to the first token: ${first.info.model} (${fmt.ms(first.fields.ttft_ms)}).`);
  const allEnded = columns.every((c) => isFinished(c.status));
  if (allEnded && fastest) {
    parts.push(`Fastest to the end: ${fastest.info.model} (${fmt.ms(fastest.fields.duration_ms)}).`);
  } else if (!allEnded) {
    parts.push(`${columns.filter((c) => isFinished(c.status)).length} of ${columns.length} answers ended.`);
  }
  const failed = columns.filter((c) => isFinished(c.status) && c.status !== "completed");
  if (failed.length) parts.push(`Not completed: ${failed.map((c) => `${c.info.model} (${c.status})`).join(", ")}.`);
  for (const c of columns) {
    c.node.classList.toggle("cmp-first", c === first);
    c.node.classList.toggle("cmp-fastest", allEnded && c === fastest);
  }
  text.textContent = parts.join(" ");
  box.hidden = !parts.length;
}

function init(root) {
  const form = document.getElementById("cmp-form");
  const errors = document.getElementById("cmp-errors");
  const grid = document.getElementById("cmp-grid");
  const send = document.getElementById("cmp-send");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  for (const swatch of root.querySelectorAll(".swatch[data-model]")) {
    swatch.style.background = colorFor(swatch.dataset.model);
  }
  let columns = [];

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    send.disabled = true;
    errors.replaceChildren();
    try {
      const r = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { Accept: "application/json", "X-CSRFToken": csrf },
      });
      const data = await r.json().catch(() => null);
      if (!r.ok || !data || !data.streams) {
        errors.append(el("p", "", (data && data.message) || `The server answered ${r.status}. Please try again.`));
        return;
      }
      for (const c of columns) c.conn?.close();
      grid.replaceChildren();
      grid.dataset.count = String(data.streams.length);
      const changed = () => summary(columns);
      columns = data.streams.map((info) => new Column(grid, info, changed));
      for (const c of columns) c.start();
    } catch {
      errors.append(el("p", "", "Could not reach the server. Check the connection and try again."));
    } finally {
      send.disabled = false;
    }
  });
}

const root = document.getElementById("compare");
if (root) init(root);
