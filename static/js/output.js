/**
 * output.js — a stream's output as it reads so far, reassembled from its events: text parts,
 * refusals, tool calls with their arguments and output, reasoning, a rewrite of the streamed
 * text. One module for every page that shows output live: the timeline (live and replay) and
 * the playground. An ES module, no build step.
 *
 *   import { LiveOutput } from "/static/js/output.js";
 *   const output = new LiveOutput(container, { playground: true, onRewrite(label) {} });
 *   output.apply(JSON.parse(event.data));   // each event's data, in arrival order
 *   output.flush();                         // write what the deltas added (once per frame)
 *   output.finish();                        // the stream ended
 *
 * It builds the DOM the server's output partial renders for a stored stream (the same
 * elements and classes), so the server's rendering can replace the live one when the stream
 * ends without the page changing shape. How an item type renders (tool card, reasoning,
 * message, anything else) is the server's: the page carries the map type → kind as
 * `{{ output_item_kinds|json_script:"output-item-kinds" }}`; a type it does not list renders
 * as "other".
 *
 * Everything a model or upstream sent goes into the page as text (textContent, Text nodes),
 * except a message's text, which is also shown as Markdown through markdown.js (HTML
 * disabled, then sanitised; the raw text stays in the page behind a "Raw" toggle).
 *
 * Keeping up with a fast or huge stream: deltas only append (`flush` writes what came since
 * the last call, once per animation frame); a text longer than the page's text limit (the
 * server's, `queries.TEXT_SHOWN`, from <meta name="output-text-shown">) lays out its head
 * only, the rest waits in an inert <template> behind "Show all" exactly as the server renders
 * it; Markdown re-renders only the growing tail after the last blank line (markdown.js's
 * `stableBoundary`), and only of the shown head.
 */
import { el, pretty } from "./dom.js";
import { forcedCut, markdownAvailable, markdownFragment, stableBoundary } from "./markdown.js";

const TEXT_DELTAS = new Map([
  ["response.output_text.delta", "output_text"],
  ["response.refusal.delta", "refusal"],
]);
const TEXT_DONE = new Map([
  ["response.output_text.done", "text"],
  ["response.refusal.done", "refusal"],
]);
// Deltas of a call's input, and the item type they belong to when they come before the item.
const ARG_DELTAS = new Map([
  ["response.function_call_arguments.delta", "function_call"],
  ["response.custom_tool_call_input.delta", "custom_tool_call"],
  ["response.mcp_call_arguments.delta", "mcp_call"],
  ["response.code_interpreter_call_code.delta", "code_interpreter_call"],
]);
const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);
const FAILED = new Set(["failed", "incomplete", "cancelled"]);

let pageKinds = null;

/** The server's map item type → kind, from the page (empty if the page has none). */
export function outputItemKinds() {
  if (pageKinds) return pageKinds;
  pageKinds = {};
  const node = document.getElementById("output-item-kinds");
  try {
    const value = node ? JSON.parse(node.textContent) : null;
    if (value && typeof value === "object" && !Array.isArray(value)) pageKinds = value;
  } catch {
    // not JSON: every item renders as "other"
  }
  return pageKinds;
}

// Markdown beyond this many characters is not rendered, even on "Show all" (markdown-it takes
// ~1 ms per 5,000 characters here: 200,000 is a long but bounded pause, on a click).
const MARKDOWN_MAX = 200_000;
// Markdown work per animation frame, in characters: new text rendered for good, and the
// growing tail re-rendered (markdown-it + DOMPurify + insertion cost ~2 ms per 1,000
// characters in Chromium here; a frame is 16 ms). A longer text renders over several frames.
const MARKDOWN_PER_FRAME = 2500;
const MARKDOWN_TAIL_MAX = 1500;
const COUNT = new Intl.NumberFormat("en-US");

let shownLimit = null;

/** Characters of a text laid out before "Show all": the server's limit, from the page. */
export function textShown() {
  if (shownLimit !== null) return shownLimit;
  const meta = document.querySelector('meta[name="output-text-shown"]');
  const value = Number.parseInt(meta?.content ?? "", 10);
  shownLimit = Number.isInteger(value) && value > 0 ? value : 20_000;
  return shownLimit;
}

const index = (v) => (Number.isInteger(v) ? v : 0);
const object = (v) => (v && typeof v === "object" ? v : {});

export class LiveOutput {
  /** `container`: where the items go (the element the server's partial fills);
   * `playground`: as the partial's `playground=True` (and streams.public.output's
   * `terminal_text`): a rewritten text keeps its streamed draft one click away, and a terminal
   * event's text becomes the answer of a stream that streamed none (the timeline shows both
   * its own way once the stream ended: a word diff, the terminal text's difference);
   * `onRewrite(label)`: a rewrite pass started ("rewriting…") or replaced a text ("rewritten"). */
  constructor(container, { kinds = outputItemKinds(), playground = false, onRewrite = () => {} } = {}) {
    this.container = container;
    this.kinds = kinds;
    this.playground = playground;
    this.onRewrite = onRewrite;
    this.items = new Map(); // output_index -> item record
    this.pending = new Set(); // text targets with text not yet in the DOM
    this.growing = null;
    this.seen = new Set(); // sequence numbers applied
  }

  kind(type) {
    return this.kinds[type] || "other";
  }

  /** Render into `container` from now on (a page that re-rendered its output region). */
  attach(container) {
    this.container = container;
  }

  reset() {
    this.container.replaceChildren();
    this.items.clear();
    this.pending.clear();
    this.seen.clear();
    this.growing = null;
  }

  /** Whether any text part has text (a terminal event's text fills in only when none came). */
  hasText() {
    for (const rec of this.items.values()) {
      for (const part of rec.parts.values()) if (part.text) return true;
    }
    return false;
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
    const oi = index(obj.output_index);
    if (TEXT_DELTAS.has(t)) {
      const part = this.part(oi, index(obj.content_index), TEXT_DELTAS.get(t));
      this.append(part, typeof obj.delta === "string" ? obj.delta : "");
    } else if (TEXT_DONE.has(t)) {
      const text = obj[TEXT_DONE.get(t)];
      if (typeof text === "string") this.textDone(oi, index(obj.content_index), text);
    } else if (ARG_DELTAS.has(t)) {
      const rec = this.item(oi, ARG_DELTAS.get(t));
      if (rec.args) this.append(rec.args, String(obj.delta ?? ""));
    } else if (t === "response.function_call_arguments.done" && typeof obj.arguments === "string") {
      const rec = this.item(oi, "function_call");
      if (rec.args) this.replace(rec.args, pretty(obj.arguments));
    } else if (t === "response.reasoning_summary_text.delta") {
      this.append(this.reasoning(oi, `summary:${index(obj.summary_index)}`), String(obj.delta ?? ""));
    } else if (t === "response.reasoning_text.delta") {
      this.append(this.reasoning(oi, `text:${index(obj.content_index)}`), String(obj.delta ?? ""));
    } else if (t === "response.output_item.added" || t === "response.output_item.done") {
      const item = object(obj.item);
      const rec = this.item(oi, item.type || "message");
      this.describe(rec, item, t === "response.output_item.done");
    } else if (t === "response.content_part.added") {
      const part = object(obj.part);
      this.part(oi, index(obj.content_index), part.type === "refusal" ? "refusal" : "output_text");
    } else if (t === "response.rewrite.in_progress") {
      this.onRewrite("rewriting…");
    } else if (TERMINAL.has(t) && this.playground) {
      // A terminal event may carry the whole text (`final_text`, or `response.output_text`)
      // of a stream that streamed none.
      const response = object(obj.response);
      const text = typeof response.output_text === "string" ? response.output_text : obj.final_text;
      if (typeof text === "string" && text && !this.hasText()) this.textDone(0, 0, text);
    }
    // Anything else adds nothing to the output (the schema is additive: never fatal).
  }

  /** Write buffered deltas: one DOM change per text per call, however many deltas came
   * (call it once per animation frame). */
  flush() {
    const later = [];
    for (const target of this.pending) {
      writeText(target);
      const limit = target.expanded ? MARKDOWN_MAX : textShown();
      if (target.md && !renderMarkdown(target.el, target.text, limit)) later.push(target);
    }
    this.pending.clear();
    // Markdown left for later frames (a large delta): it continues on its own.
    for (const target of later) this.pending.add(target);
    if (later.length && !this.again) {
      this.again = true;
      requestAnimationFrame(() => {
        this.again = false;
        this.flush();
      });
    }
  }

  /** Whether text is still waiting to be written or rendered. */
  get busy() {
    return this.pending.size > 0;
  }

  finish() {
    this.flush();
    this.growing?.classList.remove("growing");
    this.growing = null;
  }

  // -- reassembly

  append(target, chunk) {
    if (!chunk) return;
    target.text += chunk;
    this.pending.add(target);
    const growing = target.md ? target.el : target.box;
    if (this.growing !== growing) {
      this.growing?.classList.remove("growing");
      this.growing = growing;
      growing.classList.add("growing");
    }
  }

  replace(target, text) {
    // Start the text over: head, collapsed rest and Markdown are rebuilt by the next flush.
    target.tpl?.remove();
    target.button?.remove();
    target.tpl = target.rest = target.button = null;
    target.expanded = false;
    target.box.replaceChildren(target.node);
    target.node.data = "";
    target.written = 0;
    target.text = text;
    if (target.md) resetMarkdown(target.el);
    this.pending.add(target);
  }

  /** A part's final text: it replaces what streamed if a rewrite pass changed it (the
   * playground keeps the streamed draft one click away). */
  textDone(oi, ci, text) {
    const part = this.part(oi, ci);
    if (text === part.text) return;
    if (part.text) {
      if (this.playground) part.el.append(draft(part.text));
      this.onRewrite("rewritten");
    }
    this.replace(part, text);
  }

  describe(rec, item, done) {
    if (rec.kind === "tool") {
      if (item.name) rec.name.textContent = item.name;
      else if (done && !rec.name.textContent) rec.name.textContent = "(no name)";
      if (item.call_id) rec.callId.textContent = item.call_id;
      if (item.status || done) setToolStatus(rec, item.status || "done");
      if (done && typeof item.arguments === "string" && item.arguments) {
        this.replace(rec.args, pretty(item.arguments));
      }
      if (item.output !== null && item.output !== undefined) rec.output.textContent = pretty(item.output);
      else if (done) rec.output.textContent = "(none)";
    } else if (rec.kind === "message" && done && Array.isArray(item.content)) {
      // Parts that came only whole, in the item (no deltas, no content_part events).
      item.content.forEach((c, ci) => {
        if (c && typeof c.text === "string" && !rec.parts.has(ci)) this.textDone(rec.oi, ci, c.text);
      });
    } else if (rec.kind === "reasoning" && done && Array.isArray(item.summary)) {
      item.summary.forEach((s, i) => {
        if (s && typeof s.text === "string" && !rec.summary.has(`summary:${i}`)) {
          this.replace(this.reasoning(rec.oi, `summary:${i}`), s.text);
        }
      });
    } else if (rec.kind === "other" && Object.keys(item).length) {
      rec.json.textContent = JSON.stringify(item, null, 2);
    }
  }

  // -- the DOM of templates/dashboard/output.html, one item at a time

  item(oi, type) {
    let rec = this.items.get(oi);
    if (rec) return rec;
    this.container.querySelector(".empty-output")?.remove();
    rec = { oi, type, kind: this.kind(type), parts: new Map(), summary: new Map() };
    Object.assign(rec, itemElement(rec));
    rec.el.dataset.oi = String(oi);
    // Items appear in output_index order, whatever order their first events arrive in.
    const before = [...this.items.keys()].filter((k) => k < oi).sort((a, b) => b - a)[0];
    if (before === undefined) this.container.prepend(rec.el);
    else this.items.get(before).el.after(rec.el);
    this.items.set(oi, rec);
    return rec;
  }

  part(oi, ci, type = "output_text") {
    const rec = this.item(oi, "message");
    let part = rec.parts.get(ci);
    if (part) return part;
    part = { text: "", ...partElement(type) };
    part.el.dataset.part = `${oi}:${ci}`;
    const later = [...rec.parts.keys()].filter((k) => k > ci).sort((a, b) => a - b)[0];
    if (later === undefined) (rec.body || rec.el).append(part.el);
    else rec.parts.get(later).el.before(part.el);
    rec.parts.set(ci, part);
    return part;
  }

  reasoning(oi, key) {
    const rec = this.item(oi, "reasoning");
    let part = rec.summary.get(key);
    if (!part) {
      part = { text: "", ...textBox("text reasoning-text") };
      (rec.body || rec.el).append(part.box);
      rec.summary.set(key, part);
    }
    return part;
  }
}

// ---- the elements, as the server's partial renders them ---------------------------------------

/** A box of text that grows by appending to one Text node (`written`: characters in the
 * page so far; past the text limit they go to the collapsed rest, see writeText). */
function textBox(className, tag = "div") {
  const box = el(tag, className);
  const node = document.createTextNode("");
  box.append(node);
  return { box, node, text: "", written: 0, tpl: null, rest: null, button: null, expanded: false };
}

function showAllLabel(length) {
  // as the server's `count` filter writes it: thin-space thousands
  return `Show all ${COUNT.format(length).replace(/,/g, "\u202f")} characters`;
}

/** Put what `target.text` gained since the last call in the page: into the laid-out head up
 * to the text limit, beyond it into an inert <template class="text-rest"> with a "Show all"
 * button after the box (the server's own markup for a long text, output.html). */
function writeText(target) {
  const { text, box } = target;
  if (target.tpl && !target.tpl.isConnected) {
    // "Show all" was pressed: the rest is laid out now (as a last Text node); keep appending.
    target.expanded = true;
    target.tpl = target.rest = target.button = null;
    target.node = box.lastChild?.nodeType === Node.TEXT_NODE ? box.lastChild : box.appendChild(document.createTextNode(""));
  }
  if (target.written >= text.length) return;
  const limit = textShown();
  if (target.expanded || (!target.tpl && text.length <= limit)) {
    target.node.appendData(text.slice(target.written));
    target.written = text.length;
    return;
  }
  if (!target.tpl) {
    if (target.written < limit) target.node.appendData(text.slice(target.written, limit));
    target.written = limit;
    target.tpl = el("template", "text-rest");
    target.rest = document.createTextNode("");
    target.tpl.content.append(target.rest);
    box.append(target.tpl);
    target.button = el("button", "show-rest small");
    target.button.type = "button";
    box.after(target.button);
  }
  target.rest.appendData(text.slice(target.written));
  target.written = text.length;
  target.button.textContent = showAllLabel(text.length);
}

// ---- Markdown of a message's text part ---------------------------------------------------------

// Per part element: how far its text is rendered for good (a stable boundary) and how long
// the text was at the last render.
const markdownState = new WeakMap();

/** The part's Markdown body (before its raw `.text`) and toggle, made once. */
function markdownBody(part) {
  let state = markdownState.get(part);
  if (state) return state;
  const body = el("div", "md-body");
  const stable = el("div", "md-stable");
  const tail = el("div", "md-tail");
  body.append(stable, tail);
  const toggle = el("button", "md-toggle small link", "Raw");
  toggle.type = "button";
  toggle.title = "Show the text exactly as the model sent it";
  toggle.setAttribute("aria-pressed", "false");
  part.classList.add("md");
  part.prepend(toggle, body);
  state = { body, stable, tail, toggle, at: 0, length: -1, split: false };
  markdownState.set(part, state);
  return state;
}

function resetMarkdown(part) {
  const state = markdownState.get(part);
  if (!state) return;
  state.stable.replaceChildren();
  state.tail.replaceChildren();
  state.at = 0;
  state.length = -1;
  state.split = false;
}

/** Render the first `limit` characters of `text` into the part's Markdown body, at most
 * `budget` characters of it this call: what lies before a stable boundary is rendered once
 * and kept, the tail after it again. False when there is more to do (call again next frame). */
function renderMarkdown(part, text, limit, budget = MARKDOWN_PER_FRAME) {
  if (!markdownAvailable()) return true;
  const state = markdownBody(part);
  if (text.length > MARKDOWN_MAX && !part.classList.contains("raw")) setRaw(part, true);
  const shown = text.length > limit ? text.slice(0, limit) : text;
  if (shown.length === state.length) return true;
  if (shown.length < state.length) resetMarkdown(part);
  let spent = 0;
  while (shown.length - state.at > MARKDOWN_TAIL_MAX) {
    if (spent >= budget) {
      state.tail.replaceChildren();
      return false;
    }
    const cut = forcedCut(shown, state.at, MARKDOWN_TAIL_MAX);
    state.stable.append(chunk(shown.slice(state.at, cut.at), state.split, cut.split));
    state.split = cut.split;
    spent += cut.at - state.at;
    state.at = cut.at;
  }
  const next = stableBoundary(shown, state.at);
  if (next > state.at) {
    state.stable.append(chunk(shown.slice(state.at, next), state.split, false));
    state.split = false;
    state.at = next;
  }
  state.tail.replaceChildren(chunk(shown.slice(state.at), state.split, false));
  state.length = shown.length;
  return true;
}

/** One rendered piece of a text; `before` / `after`: a forced cut split the paragraph at
 * its start / end, and CSS joins the halves into one (`.md-chunk` is display: contents, the
 * halves' paragraphs inline). */
function chunk(text, before, after) {
  const box = el("div", "md-chunk");
  box.classList.toggle("cut-before", before);
  box.classList.toggle("cut-after", after);
  box.append(markdownFragment(text));
  return box;
}

/** renderMarkdown to the end, a frame's budget at a time. */
function renderMarkdownSoon(part, text, limit) {
  if (!renderMarkdown(part, text, limit)) requestAnimationFrame(() => renderMarkdownSoon(part, text, limit));
}

function setRaw(part, raw) {
  const state = markdownState.get(part);
  part.classList.toggle("raw", raw);
  if (!state) return;
  state.toggle.textContent = raw ? "Formatted" : "Raw";
  state.toggle.setAttribute("aria-pressed", String(raw));
}

/** Markdown for the message texts the server rendered inside `root` (a page's output, a
 * playground turn): the raw text stays, hidden behind the "Raw" toggle. */
export function enhanceOutput(root) {
  if (!root || !markdownAvailable()) return;
  for (const part of root.querySelectorAll(".item.message .part-output_text")) {
    if (markdownState.has(part)) continue;
    const text = part.querySelector(":scope > .text");
    if (text) renderMarkdownSoon(part, text.textContent, textShown());
  }
}

// One listener per page for what the server's and the live rendering share: "Show all" lays
// out a long text's inert rest (and its Markdown), "Raw" flips a text between its two forms.
document.addEventListener("click", (event) => {
  const toggle = event.target.closest("button.md-toggle");
  if (toggle) {
    const part = toggle.parentElement;
    setRaw(part, !part.classList.contains("raw"));
    return;
  }
  const button = event.target.closest("button.show-rest");
  if (!button) return;
  const text = button.previousElementSibling;
  const rest = text?.querySelector("template.text-rest");
  if (rest) {
    text.append(document.createTextNode(rest.content.textContent));
    rest.remove();
  }
  button.remove();
  const part = text?.parentElement;
  if (part && markdownState.has(part)) renderMarkdownSoon(part, text.textContent, MARKDOWN_MAX);
});

function head(...children) {
  const node = el("div", "item-head");
  node.append(...children);
  return node;
}

function itemElement(rec) {
  if (rec.kind === "tool") {
    const name = el("strong", "mono tool-name", "");
    const status = el("span", "badge tool-status", "in progress");
    const callId = el("span", "muted small mono", "");
    const args = textBox("args", "pre");
    const pre = args.box;
    const output = el("pre", "tool-output", "(pending)");
    const body = el("div", "tool-body");
    const argsBox = el("div");
    argsBox.append(el("div", "part-label", "Arguments"), pre);
    const outBox = el("div");
    outBox.append(el("div", "part-label", "Output"), output);
    body.append(argsBox, outBox);
    const node = el("article", "item tool");
    node.append(head(el("span", "kind", rec.type), " ", name, " ", status, " ", callId), body);
    return { el: node, name, status, callId, args, output };
  }
  if (rec.kind === "reasoning") {
    const node = el("article", "item reasoning");
    node.append(head(el("span", "kind", "reasoning")));
    return { el: node };
  }
  if (rec.kind === "message") return { el: el("article", "item message") };
  const json = el("pre");
  const node = el("article", "item other");
  node.append(head(el("span", "kind", rec.type || "item")), json);
  return { el: node, json };
}

function partElement(type) {
  const wrap = el("div", `part part-${type}`);
  if (type === "refusal") wrap.append(el("div", "part-label refusal-label", "Refusal"));
  const text = textBox("text");
  wrap.append(text.box);
  // A message's text reads as Markdown (a refusal stays as sent).
  const md = type === "output_text" && markdownAvailable();
  if (md) markdownBody(wrap);
  return { el: wrap, md, ...text };
}

function draft(text) {
  const details = el("details", "draft");
  details.append(el("summary", "small", "Streamed draft (before the rewrite)"), el("div", "text", text));
  return details;
}

function setToolStatus(rec, status) {
  const failed = FAILED.has(status);
  rec.status.textContent = status;
  rec.status.className = `badge ${failed ? "failed" : status === "completed" ? "completed" : ""} tool-status`;
  rec.el.classList.toggle("failed", failed);
}
