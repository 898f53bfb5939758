/**
 * The timeline of one stream (templates/dashboard/stream_detail.html): live while it streams,
 * replayable after. The page is server-rendered; these modules add what needs a client:
 * - Live: follows /ws/streams/<id>/ (JSON frames; streamclient.js resumes with after=) and
 *   rebuilds the output from the events as they arrive (output.js, shared with the
 *   playground), appends points to the chart, rows to the event table, and updates status and
 *   figures. Usage and cost ("—" while it runs) come with the frame that finishes it (its
 *   row's usage and cost columns), shown at once as the server shows them (format.js). When
 *   the stream ends, the server's rendering of the summary and output replaces the live one
 *   (it adds what only the whole stream knows: rewrite diffs, findings, final figures).
 * - timing_chart.js: the inter-event timing chart (uPlot) from /streams/<id>/timing.json.
 * - events_table.js: the event table, windows of rows by index range.
 * - replay.js: replay of a finished stream, through the same output renderer as live.
 *
 * Everything a model or upstream sent is put in the page with textContent or as text nodes.
 * HTML is only ever parsed from this server's own template fragments, which escape it.
 */
import { getText } from "../dom.js";
import { enhanceOutput, LiveOutput } from "../output.js";
import { connectStream } from "../streamclient.js";
import { EventTable } from "./events_table.js";
import { costNodes, costNote, fmtCount, fmtDuration, fmtMs, tokenCountNodes, tokenNote } from "./format.js";
import { fmt, num, t } from "../i18n.js";
import { Replay } from "./replay.js";
import { isActive, OUTPUT_DELTAS, statusWord, TERMINAL_EVENTS, USAGE_FIELDS } from "../vocabulary.js";
import { TimingChart } from "./timing_chart.js";

const config = JSON.parse(document.getElementById("timeline-config").textContent);

// ---- figures and status ------------------------------------------------------------------------

const FORMAT = {
  ttft_ms: fmtMs,
  duration_ms: fmtDuration,
  event_count: fmtCount,
  output_deltas: fmtCount,
  findings_count: fmtCount,
  tokens_per_s: (v) => (v === null || v === undefined ? "—" : num(v, 1)),
};

function setFields(fields) {
  for (const [name, value] of Object.entries(fields || {})) {
    const format = FORMAT[name] || ((v) => (v === null || v === undefined || v === "" ? "—" : String(v)));
    for (const node of document.querySelectorAll(`[data-field="${name}"]`)) {
      node.textContent = format(value);
    }
  }
}

// The row's usage and cost columns (USAGE_FIELDS) as the frames told them (the first frame has
// them all, the finishing one their final values), and its status: the key figures "Input
// tokens", "Output tokens" and "Cost" (templates/dashboard/stream_detail.html, rendered alike by
// format.js).
const usage = { requested_model: config.requestedModel };
let usageStatus = config.status;
let usageTold = false; // a frame said them: they stand over a summary rendered before

function showUsage() {
  const finished = !isActive(usageStatus);
  const put = (id, nodes) => document.getElementById(id)?.replaceChildren(...nodes);
  put("usage-input", tokenCountNodes(usage, "input"));
  put("usage-input-note", [tokenNote(usage, "input")]);
  put("usage-output", tokenCountNodes(usage, "output"));
  put("usage-output-note", [tokenNote(usage, "output")]);
  put("usage-cost", costNodes(usage, finished));
  put("usage-cost-note", [costNote(usage, finished)]);
}

function takeUsage(frame) {
  const fields = frame.stream || {};
  const told = USAGE_FIELDS.filter((name) => Object.hasOwn(fields, name));
  for (const name of told) usage[name] = fields[name];
  const ended = frame.status && !isActive(frame.status) && isActive(usageStatus);
  if (frame.status) usageStatus = frame.status;
  if (ended || told.some((name) => name !== "resolved_model")) {
    usageTold = true;
    showUsage();
  }
}

function setStatus(status) {
  const badge = document.getElementById("stream-status");
  if (!badge || !status) return;
  badge.textContent = statusWord(status);
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

// ---- the page --------------------------------------------------------------------------------

const table = new EventTable(config.urls);
const chart = new TimingChart((index) => table.jump(index), { proxied: config.proxied });
const renderer = new LiveOutput(document.getElementById("output-items"));
const replay = new Replay(config.urls.replay, renderer, chart);

function jumpTo(index) {
  table.jump(index);
}

// Long texts come with their tail in an inert <template>, laid out only on demand (output.js
// handles "Show all" and the Markdown / raw toggle for every page that shows output).
enhanceOutput(document.getElementById("output-items"));

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
    chart.caption.textContent = fmt(t("The timing could not be loaded (%(error)s)."), { error: error.message });
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
  // A summary asked for before the finishing frame came must not take its figures back.
  if (usageTold) showUsage();
  // The server's row counts at most every COUNT_WRITE_INTERVAL_MS while streaming: the page's
  // own count of received events stays the one it shows until the stream ends.
  if (!followEnded) showLiveCounts();
  const select = doc.getElementById("event-type");
  if (select) {
    const value = table.typeSelect.value;
    table.typeSelect.replaceChildren(...[...select.options].map((o) => document.importNode(o, true)));
    table.typeSelect.value = value;
  }
  replay.bind();
  renderer.attach(document.getElementById("output-items"));
  if (output) enhanceOutput(document.getElementById("output-items"));
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

// Live, every count on the page is the number of events this page received over the
// WebSocket (each stored before it was sent, exactly once, in order): the header, the event
// table's heading, the chart's caption (its points) and the rows the table shows
// (table.upTo). The row's `event_count` in frames lags by up to COUNT_WRITE_INTERVAL_MS.
const live = { events: 0, outputDeltas: 0 };

function showLiveCounts() {
  // The recorder stores output_deltas when the stream ends; count them meanwhile.
  setFields({ event_count: live.events, output_deltas: live.outputDeltas });
}

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
  let terminalSeen = false;
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
    probeUrl: config.probeUrl, // (null on a share link's page: no session to ask about)
    onOpen: () => setLive("live", t("live")),
    onFrame(frame) {
      let added = false;
      for (const e of frame.events || []) {
        let obj = null;
        try {
          obj = JSON.parse(e.data);
        } catch {
          // not JSON: recorded as a finding; nothing to render
        }
        const isOutput = OUTPUT_DELTAS.has(e.type);
        if (!terminalSeen) {
          if (obj) renderer.apply(obj);
          if (isOutput) live.outputDeltas += 1;
          // After the first terminal event the response has ended: later events are recorded
          // (and flagged by the checker) but are not part of its output.
          terminalSeen = TERMINAL_EVENTS.has(e.type);
        }
        chart.push(e.index, e.t_us, isOutput, e.sent_us);
        live.events = Math.max(live.events, e.index + 1);
        added = true;
      }
      requestAnimationFrame(() => renderer.flush());
      if (added && !ended) {
        table.upTo = live.events - 1;
        chart.scheduleDraw();
        table.noteNewEvents();
        showLiveCounts();
      }
      if (frame.stream) {
        // (the page's own counts stand for these: see `live`)
        const { event_count: _n, output_deltas: _t, ...fields } = frame.stream;
        setFields(fields);
        if (!frame.status && Object.keys(frame.stream).some((k) => SUMMARY_FIELDS.test(k))) {
          scheduleSummary();
        }
      }
      if (frame.stream || frame.status) takeUsage(frame);
      if (frame.status) setStatus(frame.status);
    },
    onStatus(status) {
      if (!isActive(status)) end();
    },
    onClose(info) {
      if (info.willRetry) setLive("retrying", t("reconnecting…"));
    },
    onEnd(info) {
      if (info.reason === "terminal") end();
      else if (info.reason === "signed_out") setLive("off", t("signed out"));
      else if (info.reason === "revoked") setLive("off", t("the link was revoked or has expired"));
      else setLive("off", info.reason === "refused" ? t("live updates unavailable") : "");
    },
  });
}

if (config.active) {
  table.live = true;
  chart.caption.textContent = t("Live: the chart fills in as events arrive.");
  follow();
} else {
  loadChart();
}
