/**
 * markdown.js — model text as Markdown, safely. The one place that turns model output into
 * HTML; output.js (the one output renderer) calls it for message text parts.
 *
 *   import { markdownFragment } from "./markdown.js";
 *   node.replaceChildren(markdownFragment(text));
 *
 * Two locks, either enough on its own:
 * - markdown-it (vendored, pinned) with `html: false`: raw HTML in the text is escaped, never
 *   parsed; images are switched off (a model must not make the page fetch URLs), and a link
 *   is only made for http(s)/mailto targets (`validateLink`): `[x](javascript:…)` and data
 *   URLs stay literal text.
 * - DOMPurify (vendored, pinned) over markdown-it's output, with a tag list of what Markdown
 *   produces and the same URL rule, so a markdown-it bug cannot smuggle a handler or a
 *   script in. Links get rel="noopener noreferrer nofollow" and open in a new tab.
 * The vendored files are classic UMD builds; imported for their side effect they set
 * globalThis.markdownit / globalThis.DOMPurify (no build step, same-origin files under CSP).
 */
import "../vendor/markdown-it-14.1.0/markdown-it.min.js";
import "../vendor/dompurify-3.5.0/purify.min.js";

const SAFE_URL = /^(?:https?:|mailto:)/i;
const TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];

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

/** `text` rendered as Markdown and sanitised: a DocumentFragment to put in the page. */
export function markdownFragment(text) {
  const html = renderer().render(text);
  return purify.sanitize(html, {
    ALLOWED_TAGS: TAGS,
    ALLOWED_ATTR: ["href", "title", "start", "align", "class", "rel", "target"],
    ALLOWED_URI_REGEXP: SAFE_URL,
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  });
}

/** Where to cut `text` after `from` and at most `max` characters on, when it must be cut
 * (a tail too long to re-render every frame): after a blank line, else a line break, else a
 * space, else at `max`. `split`: the cut is inside a paragraph (output.js joins the two
 * halves back into one line of text; a cut inside a list or code block shows as two). */
export function forcedCut(text, from, max) {
  const end = Math.min(text.length, from + max);
  const window = text.slice(0, end);
  const blank = stableBoundary(window, from);
  if (blank > from) return { at: blank, split: false };
  const line = window.lastIndexOf("\n");
  if (line > from) return { at: line + 1, split: true };
  const space = window.lastIndexOf(" ");
  if (space > from) return { at: space + 1, split: true };
  return { at: end, split: true };
}

/** Where `text` can be cut so that what comes before renders the same on its own: just after
 * the last blank line outside a code fence (0 if there is none). The growing tail after it
 * is the only part re-rendered while a text streams. */
export function stableBoundary(text, from = 0) {
  let fenced = false;
  let boundary = from;
  let lineStart = from;
  while (lineStart < text.length) {
    let end = text.indexOf("\n", lineStart);
    if (end < 0) break; // the last line is still growing
    const line = text.slice(lineStart, end);
    const trimmed = line.trimStart();
    if (trimmed.startsWith("```") || trimmed.startsWith("~~~")) fenced = !fenced;
    else if (!fenced && line.trim() === "" && lineStart > from) boundary = end + 1;
    lineStart = end + 1;
  }
  return boundary;
}
