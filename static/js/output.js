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
 * Everything a model or upstream sent goes into the page as text (textContent, Text nodes).
 */
import { el, pretty } from "./dom.js";

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
    this.pending = new Map(); // Text node -> chunks not yet in the DOM
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

  /** Write buffered deltas: one DOM change per text per call, however many deltas came. */
  flush() {
    for (const [node, chunks] of this.pending) node.appendData(chunks.join(""));
    this.pending.clear();
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
    const chunks = this.pending.get(target.node);
    if (chunks) chunks.push(chunk);
    else this.pending.set(target.node, [chunk]);
    if (this.growing !== target.box) {
      this.growing?.classList.remove("growing");
      this.growing = target.box;
      target.box.classList.add("growing");
    }
  }

  replace(target, text) {
    this.pending.delete(target.node);
    target.node.data = text;
    target.text = text;
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

/** A box of text that grows by appending to one Text node. */
function textBox(className) {
  const box = el("div", className);
  const node = document.createTextNode("");
  box.append(node);
  return { box, node };
}

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
    const pre = el("pre", "args");
    const args = { text: "", box: pre, node: document.createTextNode("") };
    pre.append(args.node);
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
  return { el: wrap, ...text };
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
