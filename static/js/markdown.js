/**
 * markdown.js — model text as Markdown, safely. The one place that turns model output into
 * HTML, and that decides where a text may be cut into pieces and when a piece is shown raw;
 * output.js (the one output renderer) calls it for message text parts.
 *
 *   import { markdownPiece, nextCut } from "./markdown.js";
 *   const piece = markdownPiece(text);   // { fragment } or { reason } (see NOTES)
 *
 * Two locks, either enough on its own:
 * - markdown-it (vendored, pinned) with `html: false`: raw HTML in the text is escaped, never
 *   parsed; images are switched off (a model must not make the page fetch URLs), and a link
 *   is only made for http(s)/mailto targets (`validateLink`): `[x](javascript:…)` and data
 *   URLs stay literal text.
 * - DOMPurify (vendored, pinned) over markdown-it's output, with a tag list of what Markdown
 *   produces and the same URL rule, so a markdown-it bug cannot smuggle a handler or a
 *   script in. Links get rel="noopener noreferrer nofollow" and open in a new tab.
 * What the sanitised HTML still holds that could mislead is shown for what it is (disguise.js):
 * each hidden character as a marker, and beside a link whose text is not exactly its target,
 * the host it really goes to (punycode, with a warning for a name that mixes scripts).
 * The vendored files are classic UMD builds; imported for their side effect they set
 * globalThis.markdownit / globalThis.DOMPurify (no build step, same-origin files under CSP).
 *
 * Pieces. A long or growing text is rendered a piece at a time (output.js: what is rendered
 * stays, only the growing tail is rendered again), so the text is cut only where each piece
 * renders on its own as it does inside the whole (`nextCut`, `stableBoundary`): after a blank
 * line, at a line break, or at a space, never inside a link, a link's text or target, a code
 * span, emphasis or a bare URL (it has no space a cut could take), nor where the rest would
 * start a block of its own (a list item, a quote's lazy line); a cut inside a fenced code
 * block or a table carries the fence or the table's head over to the next piece
 * (`pieceSource`), and the page joins the halves. tests/e2e/test_markdown_budgets_e2e.py
 * renders random Markdown both ways and compares what each reads as.
 *
 * Budgets. Markdown the renderer cannot handle is shown raw, whole, with a one-line note
 * (NOTES), never empty and never cut: a piece nested deeper than DEPTH_MAX (markdown-it
 * silently drops what lies deeper than its own limit, 100 levels: a 5,000-level blockquote
 * rendered as nothing), a piece with no place to cut longer than PIECE_MAX, and (output.js)
 * a text longer than it will format at all, or a piece that took too long to render.
 */
import "../vendor/markdown-it-14.1.0/markdown-it.min.js";
import "../vendor/dompurify-3.5.0/purify.min.js";
import { markLinks, revealTree } from "./disguise.js";
import { t } from "./i18n.js";

const SAFE_URL = /^(?:https?:|mailto:)/i;
const TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];

// A piece with no place to cut renders in one go up to this many characters (markdown-it +
// DOMPurify + insertion: a short pause, once; docs/performance.md, "Markdown"); a longer
// one (a 200 kB link, a minified blob) is shown raw.
export const PIECE_MAX = 20_000;
// Elements nested inside each other (quotes, lists, emphasis, links) a piece may reach: below
// markdown-it's own limit (100, beyond which it drops the text) and DOMPurify's (255, beyond
// which it removes elements), and far beyond what an answer needs.
export const DEPTH_MAX = 40;

/** What a note above a raw piece says, by reason. */
export const NOTES = {
  deep: t("Shown as raw text: too deeply nested to format"),
  long: t("Shown as raw text: too long to format without a break (a line or link of over 20 000 characters)"),
  huge: t("Shown as raw text: too long to format (over 200 000 characters)"),
  slow: t("Shown as raw text: took too long to format"),
};

let md = null;
let purify = null;

function renderer() {
  if (md) return md;
  md = globalThis.markdownit({ html: false, linkify: true, typographer: false, breaks: false });
  md.disable("image");
  md.validateLink = (url) => SAFE_URL.test(url.trim());
  purify = globalThis.DOMPurify;
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      node.setAttribute("rel", "noopener noreferrer nofollow");
      node.setAttribute("target", "_blank");
    }
  });
  return md;
}

/** Whether the page could load the libraries (a page without them shows raw text). */
export function markdownAvailable() {
  return Boolean(globalThis.markdownit && globalThis.DOMPurify?.isSupported);
}

/** How deep the elements of a token stream nest (blocks, and inline tokens inside them). */
function depthOf(tokens) {
  let depth = 0;
  let max = 0;
  for (const token of tokens) {
    depth += token.nesting;
    if (depth > max) max = depth;
    if (!token.children) continue;
    let inner = depth;
    for (const child of token.children) {
      inner += child.nesting;
      if (inner > max) max = inner;
    }
  }
  return max;
}

/** `text` as Markdown, sanitised: `{ fragment }` (a DocumentFragment to put in the page), or
 * `{ reason }` (a key of NOTES) when it is nested too deeply to render whole. */
export function markdownPiece(text) {
  const env = {};
  const tokens = renderer().parse(text, env);
  if (depthOf(tokens) >= DEPTH_MAX) return { reason: "deep" };
  const html = md.renderer.render(tokens, md.options, env);
  const fragment = purify.sanitize(html, {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ["href", "title", "start", "align", "class", "rel", "target"],
    ALLOWED_URI_REGEXP: SAFE_URL,
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  });
  markLinks(fragment); // from the links' texts as sent, before their markers are drawn
  revealTree(fragment);
  return { fragment };
}

// ---- where a text may be cut -------------------------------------------------------------------

// What a line starts with before its text: blockquote markers, list markers, a heading's #s.
const CONTAINER = /^[ \t]*(?:(?:>|(?:[-+*]|\d{1,9}[.)]|#{1,6})(?=[ \t]|$))[ \t]*)*/;
// (a quote's lines are "quote" whatever they hold: what spans them is kept whole)
const HEADING = /^[ \t]*#{1,6}(?:[ \t]|$)/;
const QUOTE = /^ {0,3}>/;
const QUOTES = /^(?: {0,3}>[ \t]?)+/;
const BULLET = /^[ \t]*[-+*][ \t]+\S/;
const ORDERED = /^[ \t]*(\d{1,9})[.)][ \t]+\S/;
const INDENTED = /^(?: {4}|\t)/;
const UNDERLINE = /^ {0,3}(?:=+|-+)[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
// What the text after a cut at a space must not start with: it would start a block (a list
// item, a heading, a quote, a fence, a rule) or a link reference definition in a piece of its own.
const NO_PIECE_START = /^(?:(?:[-+*]|\d{1,9}[.)]|#{1,6}|>)(?:[ \t]|$)|`{3}|~{3}|\[|([-*_])(?:[ \t]*\1){2,}[ \t]*$)/;
const FENCE = /^([ \t>]*(?:(?:[-+*]|\d{1,9}[.)])[ \t]+)?)(`{3,}|~{3,})(.*)$/;
const TABLE_DELIMITER = /^[ \t>]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const NONE = Object.freeze({ fence: null, table: null });
const SPACE = /[ \t]/;
const PUNCTUATION = /[!-/:-@[-`{-~\p{P}]/u;
const SPACE_OR_END = /\s/;

/** What block `line` starts, as the line after `last` (see scan): "quote", "list",
 * "heading", or null (it goes on the paragraph before, or is one). An ordered list item
 * interrupts a paragraph only from 1 ("in\n2024. we…" is one paragraph). */
function blockStart(line, last) {
  if (HEADING.test(line)) return "heading";
  if (BULLET.test(line)) return "list";
  const ordered = ORDERED.exec(line);
  if (ordered && (last !== "para" || ordered[1] === "1")) return "list";
  if (QUOTE.test(line)) return "quote";
  return null;
}

function fenceOpening(line) {
  const m = FENCE.exec(line);
  if (!m || (m[2][0] === "`" && m[3].includes("`"))) return null;
  // the piece after a cut opens the fence again at the same indentation, without a list
  // marker (that would start a new list item); its closing line likewise
  const indent = m[1].replace(/[^ \t>]/g, " ");
  return { char: m[2][0], length: m[2].length, reopen: indent + m[2] + m[3], close: indent + m[2] };
}

function closesFence(line, fence) {
  const rest = line.replace(/^[ \t>]*/, "");
  let n = 0;
  while (rest[n] === fence.char) n += 1;
  return n >= fence.length && rest.slice(n).trim() === "";
}

/** The cells of a table row (GFM: the head and the delimiter row have as many). */
function cells(line) {
  const row = line.replace(/^[ \t>]*/, "").trim().replace(/^\|/, "").replace(/(?<!\\)\|$/, "");
  return row.split(/(?<!\\)\|/).length;
}

/** Calls `visit(at, kind, ctx, split)` for every place `text` may be cut after `from`, in
 * order, until it returns true. `ctx` (also the one `from` is in: NONE, or what the cut at
 * `from` returned): a fenced code block open there (`fence`), a table whose head must be
 * repeated (`table`), a paragraph going on (`para`). Kinds: "blank" (after a blank line),
 * "line" (at a line break), "space"; `split`: the cut is inside a paragraph. Inside a line a
 * space is a place only outside a link's text and target, a code span and emphasis: a link,
 * a bare URL (it has no space) or a code span is never cut. */
function scan(text, from, ctx, visit) {
  let fence = ctx.fence;
  let table = ctx.table;
  let code = 0; // length of the backtick run that opened a code span, 0 outside one
  let brackets = 0; // `[` not yet closed: a link's text
  let target = 0; // open parentheses of a link's target, after `](`
  const emphasis = { "*": 0, _: 0, "~": 0 }; // runs that may have opened emphasis, not closed
  const open = () => Boolean(code || brackets || target || emphasis["*"] || emphasis._ || emphasis["~"]);
  const forget = () => {
    code = brackets = target = emphasis["*"] = emphasis._ = emphasis["~"] = 0;
  };
  let previous = null; // the line before, when it had a pipe: no cut after it (a table's head?)
  let tableHead = null; // the line before, when it could be a table's head (a paragraph's)
  // what the line before was: "none" (nothing, a blank line, a heading, a fence's end),
  // "para" (a paragraph's line at the top level), "other" (in a quote or list item, …)
  let last = ctx.para === undefined ? "none" : ctx.para ? "para" : "other";
  let quoteLast = "none"; // as `last`, for the text inside the quote the line before was in
  let fresh = true; // nothing since the last cut inside the fence or table
  let lineStart = from;
  while (lineStart <= text.length) {
    const newline = text.indexOf("\n", lineStart);
    const end = newline < 0 ? text.length : newline;
    const line = text.slice(lineStart, end);
    const blank = line.trim() === "";
    // a table goes on until a blank line or a line that starts another block
    if (table && (blockStart(line, "none") || fenceOpening(line) || RULE.test(line))) table = null;
    // A cut before this line (never at the very end: there is nothing to cut off yet). A list
    // item or heading starts a piece alone as it would go on; a quote line, or a paragraph's
    // next line (not a list item's lazy one), only with no link, code span or emphasis open.
    if (lineStart > from && lineStart < text.length && !blank) {
      const clean = !open();
      if (fence) {
        if (!fresh && !closesFence(line, fence)) {
          if (visit(lineStart, "line", { fence, table: null }, false)) return;
        }
      } else if (table) {
        if (!fresh && visit(lineStart, "line", { fence: null, table }, false)) return;
      } else if (previous === null && !UNDERLINE.test(line)) {
        // a block alone at the top level: not indented (an indented list item may be nested
        // in the one before; alone it would not be, and four spaces would make it code)
        const block = /^\S/.test(line) ? blockStart(line, last) : null;
        // a quote's line starts a quote of its own as it would go on in the quote: a block
        // there, or its paragraph's next line ("> 2024. x" alone would be a list; after a
        // list item's line, a lazy line of that item)
        const inner = line.replace(QUOTES, "");
        const quoted =
          last !== "other" ||
          blockStart(inner, quoteLast) ||
          (quoteLast === "para" && !blockStart(inner, "none") && !INDENTED.test(inner));
        const starts = block && (block !== "quote" || (clean && quoted));
        const continues =
          clean && last === "para" && !blockStart(line, "none") && !INDENTED.test(line) && !fenceOpening(line);
        if (starts && visit(lineStart, "line", NONE, false)) return;
        if (continues && visit(lineStart, "line", { fence: null, table: null, para: true }, true)) return;
      }
    }
    // this line
    if (fence) {
      if (closesFence(line, fence) && newline >= 0) {
        fence = null;
        last = "none";
      } else fresh = false;
    } else if (blank) {
      forget();
      table = previous = tableHead = null;
      last = "none";
      quoteLast = "none";
      if (newline >= 0 && visit(newline + 1, "blank", NONE, false)) return;
    } else if ((fence = fenceOpening(line))) {
      forget();
      quoteLast = "none";
      fresh = true;
      previous = tableHead = null;
      last = "other";
    } else if (table) {
      fresh = false;
    } else if (tableHead !== null && TABLE_DELIMITER.test(line) && cells(line) === cells(tableHead)) {
      table = `${tableHead}\n${line}`;
      fresh = true;
      previous = tableHead = null;
    } else {
      const starts = blockStart(line, last);
      if (starts === "quote") {
        const inner = line.replace(QUOTES, "");
        const within = inner.trim() ? blockStart(inner, quoteLast) : "blank";
        if (within === "blank" || within === "heading") quoteLast = "none";
        else if (within) quoteLast = "other";
        else if (quoteLast === "none") quoteLast = "para";
      } else if (starts) quoteLast = "none"; // a list or heading ends a quote; a lazy line goes on it
      const heading = starts === "heading";
      const block = starts === "list" || heading;
      if (block) forget();
      if (heading) last = "none";
      else if (starts) last = "other";
      else if (last === "none") last = "para"; // else a paragraph or a lazy line goes on
      const piped = line.includes("|"); // maybe a table's head: not cut inside
      // a paragraph's line is cut at a space only at the top level: the rest of a quote's or
      // a list item's line, alone, would leave the quote or the list
      const spaced = !piped && last === "para";
      const head = CONTAINER.exec(line)[0].length;
      for (let i = 0; i < line.length; i += 1) {
        const c = line[i];
        if (c === "\\") {
          i += 1;
        } else if (c === "`") {
          let n = 1;
          while (line[i + n] === "`") n += 1;
          if (!code) code = n;
          else if (code === n) code = 0;
          i += n - 1;
        } else if (code) {
          // inside a code span: nothing else counts
        } else if (c === "[") {
          brackets += 1;
        } else if (c === "]") {
          if (brackets) brackets -= 1;
          if (!brackets && line[i + 1] === "(") {
            target = 1;
            i += 1;
          }
        } else if (target) {
          if (c === "(") target += 1;
          else if (c === ")") target -= 1;
        } else if ((c === "*" || c === "_" || c === "~") && i >= head) {
          let n = 1;
          while (line[i + n] === c) n += 1;
          const before = i === 0 ? " " : line[i - 1];
          const after = line[i + n] ?? " ";
          // CommonMark's flanking rules: who may open and who may close emphasis
          const left = !SPACE_OR_END.test(after) && (!PUNCTUATION.test(after) || SPACE_OR_END.test(before) || PUNCTUATION.test(before));
          const right = !SPACE_OR_END.test(before) && (!PUNCTUATION.test(before) || SPACE_OR_END.test(after) || PUNCTUATION.test(after));
          const opens = c === "*" ? left : left && (!right || PUNCTUATION.test(before));
          const closes = c === "*" ? right : right && (!left || PUNCTUATION.test(after));
          // an opener counts until a run that can only close closes it; a run that can do
          // both (x*y) may open one that never closes: no cut after it in this paragraph
          if (opens) emphasis[c] += 1;
          else if (closes && emphasis[c]) emphasis[c] -= 1;
          i += n - 1;
        } else if (spaced && SPACE.test(c) && i > head && !open()) {
          const at = lineStart + i + 1;
          const rest = line.slice(i + 1);
          if (at < text.length && rest && !SPACE.test(rest[0]) && !NO_PIECE_START.test(rest)) {
            if (visit(at, "space", { fence: null, table: null, para: true }, true)) return;
          }
        }
      }
      previous = piped ? line : null;
      // (a table interrupts a paragraph at the top level; after a list item's or a quote's
      // line, the same lines are that item's or quote's text)
      tableHead = piped && last === "para" ? line : null;
    }
    if (newline < 0) break;
    lineStart = newline + 1;
  }
}

const RANK = { space: 0, line: 1, blank: 2 };

/** Where to cut `text` after `from` (in construct `ctx`, see scan): the best place at most
 * `max` characters on (after a blank line, else a line break, else a space; the last of its
 * kind), else the first place beyond; null when there is none (the rest is one piece).
 * `{ at, kind, ctx, split }`: `kind` "blank", "line" or "space"; `ctx` what the next piece
 * starts in; `split`: the cut is inside a paragraph (the page joins the two halves into one). */
export function nextCut(text, from, ctx = NONE, max = 1500) {
  let best = null;
  scan(text, from, ctx ?? NONE, (at, kind, within, split) => {
    if (at > from + max) {
      best ??= { at, kind, ctx: within, split };
      return true;
    }
    if (!best || RANK[kind] >= RANK[best.kind]) best = { at, kind, ctx: within, split };
    return false;
  });
  return best;
}

/** The first place after `from` (in construct `ctx`) where `text` may be cut between two
 * blocks or lines (after a blank line, at a line break), as nextCut answers; null if none. */
export function lineCut(text, from, ctx = NONE) {
  let found = null;
  scan(text, from, ctx ?? NONE, (at, kind, within, split) => {
    if (kind === "space") return false;
    found = { at, kind, ctx: within, split };
    return true;
  });
  return found;
}

/** Where `text` can be cut so that what comes before renders the same on its own whatever
 * follows: just after the last blank line outside a code fence (`from` if there is none).
 * The growing tail after it is the only part re-rendered while a text streams. */
export function stableBoundary(text, from = 0, ctx = NONE) {
  let boundary = from;
  scan(text, from, ctx ?? NONE, (at, kind) => {
    if (kind === "blank") boundary = at;
    return false;
  });
  return boundary;
}

/** The Markdown source of the piece `text[from:to]`, which starts in construct `before` and
 * ends in `after` (see nextCut): a fence open across the cut is closed at its end and opened
 * again at the next piece's start; a table's head is repeated at the start of its next piece. */
export function pieceSource(text, from, to, before, after) {
  before ??= NONE;
  after ??= NONE;
  let source = text.slice(from, to);
  if (before.fence) source = `${before.fence.reopen}\n${source}`;
  else if (before.table) source = `${before.table}\n${source}`;
  if (after.fence) source = `${source.endsWith("\n") ? source : `${source}\n`}${after.fence.close}\n`;
  return source;
}
