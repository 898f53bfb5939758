/**
 * compare.js — compare mode (templates/dashboard/playground_compare.html): one message to 2–4
 * models at once, their answers side by side, live. An ES module, no build step.
 *
 * The POST starts one stream per model (dashboard/views/playground.py, services.create and
 * start for each) and answers their ids; each column follows its stream's WebSocket like the
 * playground does (streamclient.js, resuming with after=) and renders its output with
 * output.js, written once per animation frame. The figures are the server's (the frames'
 * `stream` fields: TTFT, output deltas/s, duration, event and finding counts, as the timeline
 * shows them; tokens and cost from the frame that finishes the stream, as every page shows
 * them: stream_detail/format.js); the summary names who was first to the first token and to
 * the end, and the cheapest answer. Findings
 * show their severity as the list does (dashboard/templatetags/inspection.py, finding_pills):
 * errors red, the rest (warnings or info: the frames count errors apart only) grey.
 * Model output reaches the page only through output.js (text, or sanitised Markdown).
 */
import { el } from "./dom.js";
import { offerScenarios } from "./formats.js";
import { count, fmt, money, ms, num, t, tn } from "./i18n.js";
import { LiveOutput } from "./output.js";
import { colorVar } from "./palette.js";
import { connectStream } from "./streamclient.js";
import { isFinished, STATUSES, statusWord } from "./vocabulary.js";
import { costNodes, costNote, tokensNodes, usageTitle } from "./stream_detail/format.js";

const figure = {
  ms,
  rate: (v) => (typeof v === "number" ? fmt(t("%(rate)s deltas/s"), { rate: num(v, 1) }) : ""),
  count,
};

/** A stream's findings by severity, from the frames' counts: errors in red, the others
 * (warnings or info, not told apart by the frames) in grey; "0" without any. */
function findingPills(total, errors, warnings) {
  total = typeof total === "number" ? total : 0;
  errors = typeof errors === "number" ? errors : 0;
  if (!total) return [el("span", "muted", num(0))];
  const pills = [];
  const pill = (severity, text, title) => {
    const node = el("span", `sev-pill sev-pill-${severity}`, text);
    node.title = title;
    if (pills.length) pills.push(" ");
    pills.push(node);
  };
  const say = (text, n) => fmt(text, { n: count(n) });
  if (errors) {
    pill("error", say(t("%(n)s err"), errors),
      say(tn("%(n)s error finding: the protocol was broken", "%(n)s error findings: the protocol was broken", errors), errors));
  }
  if (typeof warnings === "number") {
    if (warnings) {
      pill("warning", say(t("%(n)s warn"), warnings),
        say(tn("%(n)s warning: something to look at", "%(n)s warnings: something to look at", warnings), warnings));
    }
    const info = total - errors - warnings;
    if (info > 0) {
      pill("info", say(t("%(n)s info"), info),
        say(tn("%(n)s info finding: noted, not a fault", "%(n)s info findings: noted, not a fault", info), info));
    }
    return pills;
  }
  const other = total - errors;
  if (other > 0) {
    pill("other", say(t("%(n)s warn/info"), other), say(tn(
      "%(n)s finding, no error: warnings or info (the timeline tells them apart)",
      "%(n)s findings, no error: warnings or info (the timeline tells them apart)",
      other,
    ), other));
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
    this.node.style.borderTopColor = colorVar(info.model); // the model's colour on every page (and theme)
    const head = el("div", "cmp-head");
    const title = el("strong", "mono", info.model);
    this.badge = el("span", `badge ${this.status}`, statusWord(this.status));
    const link = el("a", "pg-timeline", t("Timeline →"));
    link.href = info.timeline;
    head.append(title, " ", this.badge, link);
    this.figures = el("dl", "cmp-figures");
    this.cells = {};
    for (const [key, label] of [
      ["ttft_ms", t("TTFT")],
      ["tokens_per_s", t("Deltas/s")],
      ["duration_ms", t("Total")],
      ["event_count", t("Events")],
      ["findings_count", t("Findings")],
    ]) {
      const dd = el("dd", "", "");
      dd.dataset.f = key;
      const dt = el("dt", "", label);
      if (key === "tokens_per_s") dt.title = grid.closest("#compare")?.dataset.helpRate || "";
      this.figures.append(dt, dd);
      this.cells[key] = dd;
    }
    // tokens and cost: a line of their own (a column is narrow)
    this.usage = el("dl", "cmp-figures cmp-usage");
    const help = grid.closest("#compare")?.dataset || {};
    for (const [key, label, title] of [
      ["tokens", t("Tokens"), help.helpTokens],
      ["cost", t("Cost"), help.helpCost],
    ]) {
      const dd = el("dd", "", "—");
      dd.dataset.f = key;
      const dt = el("dt", "", label);
      if (title) dt.title = title;
      this.usage.append(dt, dd);
      this.cells[key] = dd;
    }
    this.routed = el("p", "muted small cmp-routed", "");
    const items = el("div", "items cmp-output");
    this.node.append(head, this.figures, this.usage, this.routed, items);
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
    this.cells.ttft_ms.textContent = figure.ms(f.ttft_ms);
    this.cells.tokens_per_s.textContent = figure.rate(f.tokens_per_s);
    this.cells.duration_ms.textContent = figure.ms(f.duration_ms);
    this.cells.event_count.textContent = figure.count(f.event_count);
    this.cells.findings_count.replaceChildren(...findingPills(f.findings_count, f.error_findings, f.warning_findings));
    const finished = isFinished(this.status);
    const usage = { requested_model: this.info.model, ...f };
    this.cells.tokens.replaceChildren(...tokensNodes(usage));
    this.cells.tokens.title = usageTitle(usage, finished);
    this.cells.cost.replaceChildren(...costNodes(usage, finished));
    this.cells.cost.title = costNote(usage, finished);
    this.badge.textContent = statusWord(this.status);
    this.badge.className = `badge ${this.status}`;
    if (f.resolved_model && f.resolved_model !== this.info.model) {
      this.routed.textContent = fmt(t("routed to %(model)s"), { model: f.resolved_model });
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

/** The completed answer that cost least, when two or more have a cost in one currency (costs
 * in different currencies are not compared). */
function cheapestOf(columns) {
  const priced = columns.filter((c) => c.status === "completed" && typeof c.fields.cost_nanos === "number");
  if (priced.length < 2 || new Set(priced.map((c) => c.fields.cost_currency)).size > 1) return null;
  return priced.reduce((a, b) => (b.fields.cost_nanos < a.fields.cost_nanos ? b : a));
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
  if (first) {
    parts.push(fmt(t("Fastest to the first token: %(model)s (%(time)s)."), {
      model: first.info.model,
      time: figure.ms(first.fields.ttft_ms),
    }));
  }
  const allEnded = columns.every((c) => isFinished(c.status));
  if (allEnded && fastest) {
    parts.push(fmt(t("Fastest to the end: %(model)s (%(time)s)."), {
      model: fastest.info.model,
      time: figure.ms(fastest.fields.duration_ms),
    }));
  } else if (!allEnded) {
    const ended = columns.filter((c) => isFinished(c.status)).length;
    parts.push(fmt(tn("%(ended)s of %(n)s answer ended.", "%(ended)s of %(n)s answers ended.", columns.length), {
      ended,
      n: columns.length,
    }));
  }
  const cheapest = cheapestOf(columns);
  if (allEnded && cheapest) {
    const f = cheapest.fields;
    const amount = money(f.cost_nanos, f.cost_currency);
    parts.push(fmt(t("Cheapest: %(model)s (%(cost)s)."), {
      model: cheapest.info.model,
      cost: f.usage_source === "estimated" ? `≈${amount}` : amount,
    }));
  }
  const failed = columns.filter((c) => isFinished(c.status) && c.status !== "completed");
  if (failed.length) {
    const names = failed.map((c) => `${c.info.model} (${statusWord(c.status)})`).join(", ");
    parts.push(fmt(t("Not completed: %(models)s."), { models: names }));
  }
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
    swatch.style.background = colorVar(swatch.dataset.model);
  }
  offerScenarios(document.getElementById("cmp-format"));
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
        const message = fmt(t("The server answered %(status)s. Please try again."), { status: r.status });
        errors.append(el("p", "", (data && data.message) || message));
        return;
      }
      for (const c of columns) c.conn?.close();
      grid.replaceChildren();
      grid.dataset.count = String(data.streams.length);
      const changed = () => summary(columns);
      columns = data.streams.map((info) => new Column(grid, info, changed));
      for (const c of columns) c.start();
    } catch {
      errors.append(el("p", "", t("Could not reach the server. Check the connection and try again.")));
    } finally {
      send.disabled = false;
    }
  });
}

const root = document.getElementById("compare");
if (root) init(root);
