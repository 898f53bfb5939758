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
 * message, anything else) is the server's: checks.ITEM_KINDS, the map type → kind, which every
 * page carries (vocabulary.js); a type it does not list renders as "other".
 *
 * Everything a model or upstream sent goes into the page as text (Text nodes, with each hidden
 * character drawn as a marker and a note on its item: disguise.js, as the server's `reveal`),
 * except a message's text, which is also shown as Markdown through markdown.js (HTML
 * disabled, then sanitised; the raw text stays in the page behind a "Raw" toggle).
 *
 * Keeping up with a fast or huge stream: deltas only append (`flush` writes what came since
 * the last call, once per animation frame); a text longer than the page's text limit (the
 * server's, `queries.TEXT_SHOWN`, from <meta name="output-text-shown">) lays out its head
 * only, the rest waits in an inert <template> behind "Show all" exactly as the server renders
 * it; Markdown is rendered in pieces cut where markdown.js allows (`nextCut`: never inside a
 * link, code span or emphasis; a code block or table carries its fence or head over), each
 * once, and only the growing tail after the last blank line (`stableBoundary`) again; of the
 * shown head, to the end of the piece it ends in.
 *
 * Budgets: what cannot be formatted within them is shown raw, whole, under a one-line note
 * (markdown.js NOTES), never empty or cut: a piece nested too deeply (markdown.js DEPTH_MAX;
 * it is rendered again block by block, so only the deep blocks go raw), a run with no place
 * to cut longer than PIECE_MAX, a text over MARKDOWN_MAX, and once a piece took longer than
 * MARKDOWN_SLOW_MS, the rest of its text.
 */
import { appendRevealed, noteHidden, originalText, setText } from "./disguise.js";
import { el, pretty } from "./dom.js";
import { count, fmt, t, tn } from "./i18n.js";
import {
  lineCut,
  markdownAvailable,
  markdownPiece,
  NOTES,
  nextCut,
  PIECE_MAX,
  pieceSource,
  stableBoundary,
} from "./markdown.js";
import { FAILED_TOOL_STATUSES, ITEM_KINDS, TERMINAL_EVENTS } from "./vocabulary.js";

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

// A text longer than this is not formatted at all, even on "Show all", but shown raw with a
// note (markdown-it's time grows with the text: 200,000 is a long but bounded pause, on a
// click; docs/performance.md, "Markdown").
const MARKDOWN_MAX = 200_000;
// Markdown work per animation frame, in characters: new text rendered for good, and the
// growing tail re-rendered (sized from what markdown-it + DOMPurify + insertion cost per
// character in Chromium, docs/performance.md, "Markdown"; a frame is 16 ms). A longer text
// renders over several frames.
const MARKDOWN_PER_FRAME = 2500;
const MARKDOWN_TAIL_MAX = 1500;
// A piece that took longer than this to render (markdown-it has had input that costs far more
// than its length) makes the rest of its text show raw (markdown.js NOTES.slow).
const MARKDOWN_SLOW_MS = 250;

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
   * `playground`: as the partial's `playground=True` (and streams.shapes.public.output's
   * `terminal_text`): a rewritten text keeps its streamed draft one click away, and a terminal
   * event's text becomes the answer of a stream that streamed none (the timeline shows both
   * its own way once the stream ended: a word diff, the terminal text's difference);
   * `onRewrite(label)`: a rewrite pass started ("rewriting…") or replaced a text ("rewritten"). */
  constructor(container, { kinds = ITEM_KINDS, playground = false, onRewrite = () => {} } = {}) {
    this.container = container;
    this.kinds = kinds;
    this.playground = playground;
    this.onRewrite = onRewrite;
    this.items = new Map(); // output_index -> item record
    this.pending = new Set(); // text targets with text not yet in the DOM
    this.stale = new Set(); // text targets whose Markdown waits for more text (or the end)
    this.ended = false; // finish() was called: Markdown renders whole, nothing waits
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
    this.stale.clear();
    this.ended = false;
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
    const type = obj.type;
    const oi = index(obj.output_index);
    if (TEXT_DELTAS.has(type)) {
      const part = this.part(oi, index(obj.content_index), TEXT_DELTAS.get(type));
      this.append(part, typeof obj.delta === "string" ? obj.delta : "");
    } else if (TEXT_DONE.has(type)) {
      const text = obj[TEXT_DONE.get(type)];
      if (typeof text === "string") this.textDone(oi, index(obj.content_index), text);
    } else if (ARG_DELTAS.has(type)) {
      const rec = this.item(oi, ARG_DELTAS.get(type));
      if (rec.args) this.append(rec.args, String(obj.delta ?? ""));
    } else if (type === "response.function_call_arguments.done" && typeof obj.arguments === "string") {
      const rec = this.item(oi, "function_call");
      if (rec.args) this.replace(rec.args, pretty(obj.arguments));
    } else if (type === "response.reasoning_summary_text.delta") {
      this.append(this.reasoning(oi, `summary:${index(obj.summary_index)}`), String(obj.delta ?? ""));
    } else if (type === "response.reasoning_text.delta") {
      this.append(this.reasoning(oi, `text:${index(obj.content_index)}`), String(obj.delta ?? ""));
    } else if (type === "response.output_item.added" || type === "response.output_item.done") {
      const item = object(obj.item);
      const rec = this.item(oi, item.type || "message");
      this.describe(rec, item, type === "response.output_item.done");
    } else if (type === "response.content_part.added") {
      const part = object(obj.part);
      this.part(oi, index(obj.content_index), part.type === "refusal" ? "refusal" : "output_text");
    } else if (type === "response.rewrite.in_progress") {
      this.onRewrite(t("rewriting…"));
    } else if (TERMINAL_EVENTS.has(type) && this.playground) {
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
  flush(final = this.ended) {
    const later = [];
    for (const target of this.pending) {
      writeText(target);
      const limit = target.expanded ? Infinity : textShown();
      if (!target.md) continue;
      if (!renderMarkdown(target.el, target.text, limit, { final })) later.push(target);
      else if (markdownStale(target.el)) this.stale.add(target);
      else this.stale.delete(target);
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
    // what an uncut tail still owes (markdownStale) is rendered now, whole
    for (const target of this.stale) this.pending.add(target);
    this.stale.clear();
    this.ended = true;
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
      this.onRewrite(t("rewritten"));
    }
    this.replace(part, text);
  }

  describe(rec, item, done) {
    if (rec.kind === "tool") {
      if (item.name) show(rec.name, item.name);
      else if (done && !rec.name.textContent) rec.name.textContent = t("(no name)");
      if (item.call_id) show(rec.callId, item.call_id);
      if (item.status || done) setToolStatus(rec, item.status || "done");
      if (done && typeof item.arguments === "string" && item.arguments) {
        this.replace(rec.args, pretty(item.arguments));
      }
      if (item.output !== null && item.output !== undefined) show(rec.output, pretty(item.output));
      else if (done) rec.output.textContent = t("(none)");
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
      show(rec.json, JSON.stringify(item, null, 2));
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

/** Append `target.text[from:to]` after the Text node `node`, hidden characters as markers
 * (and a note on the item); the Text node to append to next. */
function write(target, node, from, to) {
  const written = appendRevealed(node, target.text, from, to);
  if (written.hidden) noteHidden(target.box.closest(".item"));
  return written.node;
}

/** Set a node's text from model data, hidden characters as markers (and a note on the item). */
function show(node, text) {
  if (setText(node, text)) noteHidden(node.closest(".item"));
}

function showAllLabel(length) {
  // as the server's `count` filter writes it: thin-space thousands
  return fmt(tn("Show all %(n)s character", "Show all %(n)s characters", length), { n: count(length) });
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
    target.node = write(target, target.node, target.written, text.length);
    target.written = text.length;
    return;
  }
  if (!target.tpl) {
    if (target.written < limit) target.node = write(target, target.node, target.written, limit);
    target.written = limit;
    target.tpl = el("template", "text-rest");
    target.rest = document.createTextNode("");
    target.tpl.content.append(target.rest);
    box.append(target.tpl);
    target.button = el("button", "show-rest small");
    target.button.type = "button";
    box.after(target.button);
  }
  target.rest = write(target, target.rest, target.written, text.length);
  target.written = text.length;
  target.button.textContent = showAllLabel(text.length);
}

// ---- Markdown of a message's text part ---------------------------------------------------------

// Per part element: where its text is rendered for good (`at`, a place markdown.js allows a cut,
// and the construct the text is in there), how the last piece ended, and the text's length and
// limit at the last render.
const markdownState = new WeakMap();

/** The part's Markdown body (before its raw `.text`) and toggle, made once. */
function markdownBody(part) {
  let state = markdownState.get(part);
  if (state) return state;
  const body = el("div", "md-body");
  const stable = el("div", "md-stable");
  const tail = el("div", "md-tail");
  body.append(stable, tail);
  const toggle = el("button", "md-toggle small link", t("Raw"));
  toggle.type = "button";
  toggle.title = t("Show the text exactly as the model sent it");
  toggle.setAttribute("aria-pressed", "false");
  part.classList.add("md");
  part.prepend(toggle, body);
  state = { body, stable, tail, toggle };
  markdownState.set(part, state);
  resetMarkdown(part);
  return state;
}

function resetMarkdown(part) {
  const state = markdownState.get(part);
  if (!state) return;
  state.stable.replaceChildren();
  state.tail.replaceChildren();
  Object.assign(state, {
    at: 0, // rendered for good up to here
    ctx: undefined, // the construct the text is in at `at` (markdown.js nextCut)
    edge: null, // how the piece before `at` ended (its cut), null at the start or a blank line
    length: -1, // the text's length and limit at the last render
    limit: 0,
    stale: false, // the tail shows less than the text (rendered again when it grew enough)
    tailLength: 0,
    huge: -1, // characters shown raw because the whole text is too long to format
    slow: false, // a piece took too long: the rest is shown raw
    rawTail: null, // the tail's raw text, when it goes on the last piece's raw text
  });
}

/** Render `text` into the part's Markdown body: its first `limit` characters and on to the
 * end of the piece they end in, at most `budget` characters this call. Pieces before a cut
 * (markdown.js nextCut: never inside a link, code span or emphasis) are rendered once and
 * kept; a piece markdown.js or the budgets refuse is shown raw with a note (NOTES), whole; the
 * growing tail is rendered again (an uncut tail over MARKDOWN_TAIL_MAX once it grew by a
 * quarter, or when `final`). False when there is more to do (call again next frame). */
function renderMarkdown(part, text, limit, { budget = MARKDOWN_PER_FRAME, final = false } = {}) {
  if (!markdownAvailable()) return true;
  const state = markdownBody(part);
  if (text.length < state.length || limit < state.limit) resetMarkdown(part);
  const shown = Math.min(text.length, limit);
  if (text.length > MARKDOWN_MAX) {
    // Not formatted at all: the text as it came (what is laid out of it), with the note.
    if (state.huge < 0) {
      resetMarkdown(part);
      state.stable.append(rawPiece("", "huge"));
      state.huge = 0;
    }
    if (shown > state.huge) state.stable.querySelector(".md-raw").append(el("span", null, text.slice(state.huge, shown)));
    state.huge = shown;
    return true;
  }
  if (text.length === state.length && limit === state.limit && !(final && state.stale)) return true;
  state.rawTail?.remove();
  state.rawTail = null;
  state.tail.replaceChildren();
  const capped = text.length > limit; // the rest waits behind "Show all"
  let spent = 0;
  let tailDone = false;
  while (state.at < shown) {
    if (!capped && text.length - state.at <= MARKDOWN_TAIL_MAX) break;
    if (spent >= budget) return false;
    const cut = nextCut(text, state.at, state.ctx, MARKDOWN_TAIL_MAX);
    const end = cut ? cut.at : text.length;
    const size = end - state.at;
    if (size > PIECE_MAX && (!cut || end > shown)) {
      // no place to cut before the end of what is shown: raw as far as that goes, as the
      // tail (the text, or the limit, may still grow)
      tailRaw(state, text.slice(state.at, shown), "long");
      tailDone = true;
      break;
    }
    if (!cut) break; // the rest is one piece, maybe still growing: the tail, below
    commit(state, text, cut, size > PIECE_MAX ? "long" : null);
    spent += Math.min(size, PIECE_MAX);
  }
  if (!tailDone && state.at < shown) {
    const next = stableBoundary(text, state.at, state.ctx);
    if (next > state.at) commit(state, text, { at: next, kind: "blank", ctx: undefined, split: false });
    const rest = text.length - state.at;
    if (rest > PIECE_MAX) {
      tailRaw(state, text.slice(state.at, shown), "long");
    } else if (final && !capped && rest > 0) {
      // the text is whole: its last piece is rendered for good (block by block if too deep)
      commit(state, text, null);
    } else if (!final && rest > MARKDOWN_TAIL_MAX && state.tailShown && rest < state.tailLength * 1.25) {
      // an uncut run (a long link, a line with no space) re-rendered at every frame would cost
      // its whole length every time: again once it grew by a quarter (or at the end); its new
      // text shows as text meanwhile
      state.tail.append(state.tailShown, el("span", null, text.slice(state.at + state.tailLength)));
      state.stale = true;
    } else if (rest > 0) {
      const piece = renderPiece(state, text, text.length, null);
      if (piece.box) state.tail.append(piece.box);
      else tailRaw(state, text.slice(state.at), piece.reason);
      state.tailShown = piece.box;
      state.tailLength = rest;
      state.stale = false;
    }
  }
  state.length = text.length;
  state.limit = limit;
  return true;
}

/** Render the text from `state.at` to `cut` (null: the text's end) for good, and move on. A
 * piece too deeply nested as a whole is rendered again block by block (line by line), so
 * that only what is too deep shows raw. */
function commit(state, text, cut, reason = null) {
  const end = cut ? cut.at : text.length;
  const start = state.at;
  let piece = renderPiece(state, text, end, cut, reason);
  if (piece.reason === "deep") {
    for (let inner = lineCut(text, state.at, state.ctx); inner && inner.at < end; ) {
      advance(state, text, inner, renderPiece(state, text, inner.at, inner));
      inner = lineCut(text, state.at, state.ctx);
    }
    if (state.at !== start) piece = renderPiece(state, text, end, cut);
  }
  advance(state, text, cut, piece);
}

/** Put a rendered piece (or its raw text) in the page and move on to `cut`. */
function advance(state, text, cut, piece) {
  const end = cut ? cut.at : text.length;
  if (piece.box) state.stable.append(piece.box);
  else state.stable.append(rawPiece(text.slice(state.at, end), piece.reason, lastRaw(state, piece.reason)));
  state.at = end;
  state.ctx = cut?.ctx;
  state.edge = cut && cut.kind !== "blank" ? cut : null;
  state.tailShown = null;
  state.tailLength = 0;
}

/** One piece of the text, `text[state.at:end]` ending at `cut`, rendered: `{ box }` (a
 * `.md-chunk`), or `{ reason }` to show it raw. The classes let CSS join what a cut split: a
 * paragraph (`cut-*`: its halves inline), a fenced code block (`fence-*`) or a table
 * (`table-*`: its repeated head hidden); `cont-*`: no gap between the two. */
function renderPiece(state, text, end, cut, reason = null) {
  if (reason || state.slow) return { reason: reason || "slow" };
  const before = state.edge;
  const source = pieceSource(text, state.at, end, state.ctx, cut?.ctx);
  let started = performance.now();
  let piece = markdownPiece(source);
  if (piece.reason) return piece;
  if (performance.now() - started > MARKDOWN_SLOW_MS) {
    // Input markdown-it takes this long over would take it again at every frame of a growing
    // tail: the rest of the text goes raw. Timed twice, so that a pause of the page (a busy
    // machine, a garbage collection) does not count as the input's.
    started = performance.now();
    piece = markdownPiece(source);
    if (performance.now() - started > MARKDOWN_SLOW_MS) state.slow = true;
  }
  const box = el("div", "md-chunk");
  box.append(piece.fragment);
  const classes = {
    "cut-before": before?.split,
    "cut-after": cut?.split,
    "fence-before": before?.ctx?.fence,
    "fence-after": cut?.ctx?.fence,
    "table-before": before?.ctx?.table,
    "table-after": cut?.ctx?.table,
    "cont-before": before,
    "cont-after": cut && cut.kind !== "blank",
  };
  for (const [name, on] of Object.entries(classes)) if (on) box.classList.add(name);
  return { box };
}

/** The last piece rendered for good, if it is raw for `reason` (raw text after it goes on its
 * text, under the same note). */
function lastRaw(state, reason) {
  const last = state.stable.lastElementChild;
  return last?.classList.contains("md-fallback") && last.dataset.reason === reason ? last : null;
}

/** Text shown raw, whole, under a one-line note saying why: a new `.md-fallback` chunk, or
 * (`onto`) more text of the one before (then nothing new to append). */
function rawPiece(text, reason, onto = null) {
  if (onto) {
    onto.querySelector(".md-raw").append(el("span", null, text));
    return document.createDocumentFragment();
  }
  const box = el("div", "md-chunk md-fallback");
  box.dataset.reason = reason;
  const note = el("p", "md-note", NOTES[reason]);
  note.setAttribute("role", "note");
  box.append(note, el("div", "md-raw", text));
  return box;
}

/** The tail as raw text for `reason`: onto the last piece's raw text when that is raw for the
 * same reason (one note), else a raw piece of its own. */
function tailRaw(state, text, reason) {
  const onto = lastRaw(state, reason);
  if (onto) {
    state.rawTail = el("span", null, text);
    onto.querySelector(".md-raw").append(state.rawTail);
  } else state.tail.append(rawPiece(text, reason));
  state.tailShown = null;
  state.stale = false;
}

/** Whether the part's Markdown shows less than its text (an uncut tail waiting to grow). */
function markdownStale(part) {
  return Boolean(markdownState.get(part)?.stale);
}

/** renderMarkdown to the end, a frame's budget at a time. */
function renderMarkdownSoon(part, text, limit) {
  if (!renderMarkdown(part, text, limit, { final: true })) {
    requestAnimationFrame(() => renderMarkdownSoon(part, text, limit));
  }
}

function setRaw(part, raw) {
  const state = markdownState.get(part);
  part.classList.toggle("raw", raw);
  if (!state) return;
  state.toggle.textContent = raw ? t("Formatted") : t("Raw");
  state.toggle.setAttribute("aria-pressed", String(raw));
}

/** Markdown for the message texts the server rendered inside `root` (a page's output, a
 * playground turn): the raw text stays, hidden behind the "Raw" toggle. */
export function enhanceOutput(root) {
  if (!root || !markdownAvailable()) return;
  for (const part of root.querySelectorAll(".item.message .part-output_text")) {
    if (markdownState.has(part)) continue;
    const text = part.querySelector(":scope > .text");
    if (text) renderMarkdownSoon(part, originalText(text), textShown());
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
    text.append(rest.content); // its text and markers, moved
    rest.remove();
  }
  button.remove();
  const part = text?.parentElement;
  if (part && markdownState.has(part)) renderMarkdownSoon(part, originalText(text), Infinity);
});

function head(...children) {
  const node = el("div", "item-head");
  node.append(...children);
  return node;
}

function itemElement(rec) {
  if (rec.kind === "tool") {
    const name = el("strong", "mono tool-name", "");
    const status = el("span", "badge tool-status", t("in progress"));
    const callId = el("span", "muted small mono", "");
    const args = textBox("args", "pre");
    const pre = args.box;
    const output = el("pre", "tool-output", t("(pending)"));
    const body = el("div", "tool-body");
    const argsBox = el("div");
    argsBox.append(el("div", "part-label", t("Arguments")), pre);
    const outBox = el("div");
    outBox.append(el("div", "part-label", t("Output")), output);
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
  if (type === "refusal") wrap.append(el("div", "part-label refusal-label", t("Refusal")));
  const text = textBox("text");
  wrap.append(text.box);
  // A message's text reads as Markdown (a refusal stays as sent).
  const md = type === "output_text" && markdownAvailable();
  if (md) markdownBody(wrap);
  return { el: wrap, md, ...text };
}

function draft(text) {
  const details = el("details", "draft");
  details.append(el("summary", "small", t("Streamed draft (before the rewrite)")), el("div", "text", text));
  return details;
}

function setToolStatus(rec, status) {
  const failed = FAILED_TOOL_STATUSES.has(status);
  show(rec.status, status);
  rec.status.className = `badge ${failed ? "failed" : status === "completed" ? "completed" : ""} tool-status`;
  rec.el.classList.toggle("failed", failed);
}
