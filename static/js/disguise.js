/**
 * disguise.js — text that disguises itself, shown for what it is (issue 42; docs/security.md,
 * "Text that disguises itself"). An ES module, no build step.
 *
 * Hidden characters. A right-to-left override makes `factuur\u202efdp.exe` read
 * "factuurexe.pdf"; zero-width and other default-ignorable characters hide inside a word or
 * smuggle whole texts (tag characters spell ASCII nobody sees). Wherever the scripts put
 * recorded text in a page (dom.js `el`, the live output, the Markdown view) each such
 * character is drawn as a marker, `⟨U+202E⟩`, named in its title (and so to screen readers:
 * role="img"), isolated so that it reorders nothing around it; the item it is in gets a note.
 * This is the scripts' definition (RANGES, `name`, the emoji rule); dashboard/disguise.py is
 * the server's, for what the templates render, and tests/e2e/test_disguise_e2e.py holds the
 * two to the same code points, names and rules. Only the display changes: a marker carries
 * its code point, `originalText` reads a box back as it was sent (the Markdown source of a
 * server-rendered text), and copying a selection gives the original characters.
 *
 * Links. A link drawn from model output shows where it goes (`markLinks`): its host, as the
 * browser will resolve it (punycode for a name that is not ASCII), beside any link whose text
 * is not exactly its target, and a warning when one label of the name mixes Latin with
 * Cyrillic or Greek letters (`аpple.com` with a Cyrillic а).
 */
import { fmt, t } from "./i18n.js";

// Inclusive ranges of code points drawn as markers (dashboard/disguise.py RANGES: the same):
// every Default_Ignorable_Code_Point, the interlinear annotation controls, and the C0/C1
// controls but tab, line feed and carriage return.
export const RANGES = [
  [0x0000, 0x0008], [0x000b, 0x000c], [0x000e, 0x001f], [0x007f, 0x009f],
  [0x00ad, 0x00ad], [0x034f, 0x034f], [0x061c, 0x061c], [0x115f, 0x1160], [0x17b4, 0x17b5],
  [0x180b, 0x180f], [0x200b, 0x200f], [0x202a, 0x202e], [0x2060, 0x206f], [0x3164, 0x3164],
  [0xfe00, 0xfe0f], [0xfeff, 0xfeff], [0xffa0, 0xffa0], [0xfff0, 0xfffb], [0x1bca0, 0x1bca3],
  [0x1d173, 0x1d17a], [0xe0000, 0xe0fff],
];

const C0 = (
  "NUL SOH STX ETX EOT ENQ ACK BEL BS HT LF VT FF CR SO SI " +
  "DLE DC1 DC2 DC3 DC4 NAK SYN ETB CAN EM SUB ESC FS GS RS US"
).split(" ");
const C1 = (
  "PAD HOP BPH NBH IND NEL SSA ESA HTS HTJ VTS PLD PLU RI SS2 SS3 " +
  "DCS PU1 PU2 STS CCH MW SPA EPA SOS SGCI SCI CSI ST OSC PM APC"
).split(" ");
// Unicode's names of the single characters; controls, tags and selectors are named by rule.
const NAMES = new Map([
  [0x00ad, "SOFT HYPHEN"], [0x034f, "COMBINING GRAPHEME JOINER"], [0x061c, "ARABIC LETTER MARK"],
  [0x115f, "HANGUL CHOSEONG FILLER"], [0x1160, "HANGUL JUNGSEONG FILLER"],
  [0x17b4, "KHMER VOWEL INHERENT AQ"], [0x17b5, "KHMER VOWEL INHERENT AA"],
  [0x180b, "MONGOLIAN FREE VARIATION SELECTOR ONE"], [0x180c, "MONGOLIAN FREE VARIATION SELECTOR TWO"],
  [0x180d, "MONGOLIAN FREE VARIATION SELECTOR THREE"], [0x180e, "MONGOLIAN VOWEL SEPARATOR"],
  [0x180f, "MONGOLIAN FREE VARIATION SELECTOR FOUR"],
  [0x200b, "ZERO WIDTH SPACE"], [0x200c, "ZERO WIDTH NON-JOINER"], [0x200d, "ZERO WIDTH JOINER"],
  [0x200e, "LEFT-TO-RIGHT MARK"], [0x200f, "RIGHT-TO-LEFT MARK"],
  [0x202a, "LEFT-TO-RIGHT EMBEDDING"], [0x202b, "RIGHT-TO-LEFT EMBEDDING"],
  [0x202c, "POP DIRECTIONAL FORMATTING"], [0x202d, "LEFT-TO-RIGHT OVERRIDE"],
  [0x202e, "RIGHT-TO-LEFT OVERRIDE"],
  [0x2060, "WORD JOINER"], [0x2061, "FUNCTION APPLICATION"], [0x2062, "INVISIBLE TIMES"],
  [0x2063, "INVISIBLE SEPARATOR"], [0x2064, "INVISIBLE PLUS"],
  [0x2066, "LEFT-TO-RIGHT ISOLATE"], [0x2067, "RIGHT-TO-LEFT ISOLATE"], [0x2068, "FIRST STRONG ISOLATE"],
  [0x2069, "POP DIRECTIONAL ISOLATE"], [0x206a, "INHIBIT SYMMETRIC SWAPPING"],
  [0x206b, "ACTIVATE SYMMETRIC SWAPPING"], [0x206c, "INHIBIT ARABIC FORM SHAPING"],
  [0x206d, "ACTIVATE ARABIC FORM SHAPING"], [0x206e, "NATIONAL DIGIT SHAPES"], [0x206f, "NOMINAL DIGIT SHAPES"],
  [0x3164, "HANGUL FILLER"], [0xfeff, "ZERO WIDTH NO-BREAK SPACE"], [0xffa0, "HALFWIDTH HANGUL FILLER"],
  [0xfff9, "INTERLINEAR ANNOTATION ANCHOR"], [0xfffa, "INTERLINEAR ANNOTATION SEPARATOR"],
  [0xfffb, "INTERLINEAR ANNOTATION TERMINATOR"],
  [0x1bca0, "SHORTHAND FORMAT LETTER OVERLAP"], [0x1bca1, "SHORTHAND FORMAT CONTINUING OVERLAP"],
  [0x1bca2, "SHORTHAND FORMAT DOWN STEP"], [0x1bca3, "SHORTHAND FORMAT UP STEP"],
  [0x1d173, "MUSICAL SYMBOL BEGIN BEAM"], [0x1d174, "MUSICAL SYMBOL END BEAM"],
  [0x1d175, "MUSICAL SYMBOL BEGIN TIE"], [0x1d176, "MUSICAL SYMBOL END TIE"],
  [0x1d177, "MUSICAL SYMBOL BEGIN SLUR"], [0x1d178, "MUSICAL SYMBOL END SLUR"],
  [0x1d179, "MUSICAL SYMBOL BEGIN PHRASE"], [0x1d17a, "MUSICAL SYMBOL END PHRASE"],
  [0xe0001, "LANGUAGE TAG"], [0xe007f, "CANCEL TAG"],
]);

const CLASS = RANGES.map(([a, b]) => `\\u{${a.toString(16)}}-\\u{${b.toString(16)}}`).join("");
const HIDDEN = new RegExp(`[${CLASS}]`, "gu");
const ANY_HIDDEN = new RegExp(`[${CLASS}]`, "u");
// Emoji are "other symbols" (So): a property as plain as this reads the same here and in
// Python's unicodedata (dashboard/disguise.py).
const PICTOGRAPH = /^\p{So}$/u;
const ZWJ = 0x200d;
const KEYCAP = "\u20e3";
const KEYCAP_BASES = "#*0123456789";

/** The character's name as its marker's title gives it: Unicode's, or by rule. */
export function charName(cp) {
  if (NAMES.has(cp)) return NAMES.get(cp);
  if (cp < 0x20) return `CONTROL CHARACTER ${C0[cp]}`;
  if (cp === 0x7f) return "CONTROL CHARACTER DEL";
  if (cp >= 0x80 && cp <= 0x9f) return `CONTROL CHARACTER ${C1[cp - 0x80]}`;
  if (cp >= 0xfe00 && cp <= 0xfe0f) return `VARIATION SELECTOR-${cp - 0xfe00 + 1}`;
  if (cp >= 0xe0100 && cp <= 0xe01ef) return `VARIATION SELECTOR-${cp - 0xe0100 + 17}`;
  // what a tag character spells is the point of smuggling it: the title says it
  if (cp >= 0xe0020 && cp <= 0xe007e) return `TAG ‘${String.fromCharCode(cp - 0xe0000)}’`;
  return "RESERVED INVISIBLE CHARACTER";
}

const hex = (cp) => cp.toString(16).toUpperCase().padStart(4, "0");

/** A marker's title: "U+202E RIGHT-TO-LEFT OVERRIDE", "… ×3" for a run. */
export function charTitle(cp, n = 1) {
  return `U+${hex(cp)} ${charName(cp)}${n > 1 ? ` ×${n}` : ""}`;
}

/** A marker's text: "⟨U+202E⟩", "⟨U+200B ×3⟩" for a run. */
export function charLabel(cp, n = 1) {
  return `⟨U+${hex(cp)}${n > 1 ? ` ×${n}` : ""}⟩`;
}

/** The code point that ends at `i` in `text`, and where it starts. */
function before(text, i) {
  if (i <= 0) return ["", 0];
  const start = i >= 2 && /[\ud800-\udbff][\udc00-\udfff]/.test(text.slice(i - 2, i)) ? i - 2 : i - 1;
  return [text.slice(start, i), start];
}

/** Whether the character `cp` at `i` is part of an emoji sequence, not hidden in one: a
 * presentation selector right after a pictograph or in a keycap (⚠️, 1️⃣), a joiner between
 * pictographs (👩‍💻; the one before it may wear a selector or a skin tone). */
function inEmoji(text, i, cp) {
  const [prev, p] = before(text, i);
  const at = i + (cp > 0xffff ? 2 : 1);
  const next = at < text.length ? String.fromCodePoint(text.codePointAt(at)) : "";
  if (cp === 0xfe0e || cp === 0xfe0f) {
    if (prev && PICTOGRAPH.test(prev)) return true;
    return prev !== "" && KEYCAP_BASES.includes(prev) && next === KEYCAP;
  }
  if (cp !== ZWJ || !next || !PICTOGRAPH.test(next)) return false;
  let base = prev;
  const worn = prev ? prev.codePointAt(0) : 0;
  if (worn === 0xfe0f || (worn >= 0x1f3fb && worn <= 0x1f3ff)) base = before(text, p)[0];
  return base !== "" && PICTOGRAPH.test(base);
}

/** The hidden characters of `text[from:to]` (read in the context of the whole text) as runs of
 * one character: [{ start, end, cp, n }]. */
export function hiddenRuns(text, from = 0, to = text.length) {
  const found = [];
  if (!ANY_HIDDEN.test(text.slice(from, to))) return found;
  HIDDEN.lastIndex = from;
  for (let m = HIDDEN.exec(text); m && m.index < to; m = HIDDEN.exec(text)) {
    const cp = m[0].codePointAt(0);
    if (inEmoji(text, m.index, cp)) continue;
    const last = found.at(-1);
    const end = m.index + m[0].length;
    if (last && last.end === m.index && last.cp === cp) {
      last.end = end;
      last.n += 1;
    } else found.push({ start: m.index, end, cp, n: 1 });
  }
  return found;
}

/** Whether `text` holds a character drawn as a marker. */
export function hasHidden(text) {
  return hiddenRuns(text).length > 0;
}

/** One marker (dashboard/disguise.py `marker_html` renders the same element). */
export function marker(cp, n = 1) {
  const node = document.createElement("span");
  node.className = "hidden-char";
  node.setAttribute("role", "img");
  node.dataset.cp = hex(cp);
  if (n > 1) node.dataset.n = String(n);
  node.title = charTitle(cp, n);
  node.textContent = charLabel(cp, n);
  return node;
}

/** `text[from:to]` as nodes: its text, each hidden run a marker. */
export function revealed(text, from = 0, to = text.length) {
  const fragment = document.createDocumentFragment();
  let at = from;
  for (const run of hiddenRuns(text, from, to)) {
    if (run.start > at) fragment.append(text.slice(at, run.start));
    fragment.append(marker(run.cp, run.n));
    at = run.end;
  }
  if (at < to) fragment.append(text.slice(at, to));
  return fragment;
}

/** `text` with each hidden run written as its marker's label, for where only text can go
 * (an attribute, an <option>). */
export function revealedString(text) {
  let out = "";
  let at = 0;
  for (const run of hiddenRuns(text)) {
    out += text.slice(at, run.start) + charLabel(run.cp, run.n);
    at = run.end;
  }
  return out + text.slice(at);
}

const TEXT_ONLY = new Set(["OPTION", "TEXTAREA", "TITLE"]);

/** Set `node`'s text to `text`, hidden characters as markers; whether it held any. */
export function setText(node, text) {
  const value = String(text);
  if (!hasHidden(value)) {
    node.textContent = value;
    return false;
  }
  if (TEXT_ONLY.has(node.tagName)) node.textContent = revealedString(value);
  else node.replaceChildren(revealed(value));
  return true;
}

/** Append `text[from:to]` after the Text node `node` (the end of a growing text): onto it when
 * it holds no hidden character, else as text and markers after it. `{ node, hidden }`: the
 * Text node to append to next, and whether markers were added. */
export function appendRevealed(node, text, from, to = text.length) {
  const runs = hiddenRuns(text, from, to);
  if (!runs.length) {
    node.appendData(text.slice(from, to));
    return { node, hidden: false };
  }
  node.appendData(text.slice(from, runs[0].start));
  const fragment = document.createDocumentFragment();
  let at = runs[0].start;
  for (const run of runs) {
    if (run.start > at) fragment.append(text.slice(at, run.start));
    fragment.append(marker(run.cp, run.n));
    at = run.end;
  }
  const last = document.createTextNode(text.slice(at, to));
  fragment.append(last);
  node.after(fragment);
  return { node: last, hidden: true };
}

/** Draw the hidden characters of every text and title under `root` (rendered Markdown) as
 * markers; how many texts held any. */
export function revealTree(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const found = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (ANY_HIDDEN.test(node.data) && !node.parentElement?.closest(".hidden-char")) found.push(node);
  }
  for (const node of found) node.replaceWith(revealed(node.data));
  for (const node of root.querySelectorAll("[title]")) {
    if (!node.classList.contains("hidden-char")) node.title = revealedString(node.title);
  }
  return found.length;
}

/** The characters a marker stands for. */
function markedText(mark) {
  return String.fromCodePoint(Number.parseInt(mark.dataset.cp, 16)).repeat(Number(mark.dataset.n || 1));
}

/** The text under `node` as it was sent: markers read as their characters, the rest of a long
 * text (its inert <template>) included, link hosts left out. */
export function originalText(node) {
  const parts = [];
  const walk = (parent) => {
    for (let child = parent.firstChild; child; child = child.nextSibling) {
      if (child.nodeType === Node.TEXT_NODE) parts.push(child.data);
      else if (child.nodeType !== Node.ELEMENT_NODE || child.classList.contains("link-host")) continue;
      else if (child.classList.contains("hidden-char")) parts.push(markedText(child));
      else walk(child.tagName === "TEMPLATE" ? child.content : child);
    }
  };
  if (node.nodeType === Node.TEXT_NODE) return node.data;
  walk(node);
  return parts.join("");
}

/** The note an output item gets once it holds a hidden character (the server's
 * `hidden_note`, dashboard/templatetags/inspection.py, with the same words): after its head. */
export function noteHidden(item) {
  if (!item || item.querySelector(":scope > .hidden-note")) return;
  const note = document.createElement("p");
  note.className = "hidden-note";
  note.setAttribute("role", "note");
  note.textContent = t(
    "Hidden characters: this holds invisible or bidirectional Unicode characters, which can hide text or change the order it reads in. Each is shown as ⟨U+…⟩, named in its tooltip; exports and copies keep them as they are.",
  );
  const head = item.querySelector(":scope > .item-head");
  if (head) head.after(note);
  else item.prepend(note);
}

// ---- links ---------------------------------------------------------------------------------------

const LATIN = /\p{Script=Latin}/u;
// Scripts with letters that pass for Latin ones (а/a, ο/o), and what a badge's title says.
const LOOKALIKES = [
  ["Cyrillic", /\p{Script=Cyrillic}/u, t("Its name mixes Latin and Cyrillic letters: it may imitate another name.")],
  ["Greek", /\p{Script=Greek}/u, t("Its name mixes Latin and Greek letters: it may imitate another name.")],
];

/** RFC 3492's decoding of a punycode label (without its "xn--"); null if it is not one. */
export function punycodeDecode(input) {
  const BASE = 36;
  const T_MIN = 1;
  const T_MAX = 26;
  const adapt = (delta, points, first) => {
    let d = first ? Math.floor(delta / 700) : delta >> 1;
    d += Math.floor(d / points);
    let k = 0;
    for (; d > ((BASE - T_MIN) * T_MAX) >> 1; k += BASE) d = Math.floor(d / (BASE - T_MIN));
    return k + Math.floor(((BASE - T_MIN + 1) * d) / (d + 38));
  };
  const digit = (c) => {
    if (c >= 0x30 && c <= 0x39) return c - 22;
    if (c >= 0x41 && c <= 0x5a) return c - 0x41;
    if (c >= 0x61 && c <= 0x7a) return c - 0x61;
    return BASE;
  };
  const dash = input.lastIndexOf("-");
  const output = dash > 0 ? [...input.slice(0, dash)].map((c) => c.codePointAt(0)) : [];
  let n = 128;
  let i = 0;
  let bias = 72;
  for (let at = dash > 0 ? dash + 1 : 0; at < input.length; ) {
    const old = i;
    for (let w = 1, k = BASE; ; k += BASE) {
      if (at >= input.length) return null;
      const d = digit(input.charCodeAt(at++));
      if (d >= BASE) return null;
      i += d * w;
      const threshold = k <= bias ? T_MIN : k >= bias + T_MAX ? T_MAX : k - bias;
      if (d < threshold) break;
      w *= BASE - threshold;
    }
    bias = adapt(i - old, output.length + 1, old === 0);
    n += Math.floor(i / (output.length + 1));
    i %= output.length + 1;
    if (n > 0x10ffff) return null;
    output.splice(i, 0, n);
    i += 1;
  }
  return String.fromCodePoint(...output);
}

/** The scripts a host name's label mixes with Latin letters (["Cyrillic"]), over all its
 * labels; [] when none does. `host`: as the URL parser gives it (punycode). */
export function mixedScripts(host) {
  const found = new Set();
  for (const label of host.split(".")) {
    const name = label.toLowerCase().startsWith("xn--") ? punycodeDecode(label.slice(4)) : label;
    if (!name || !LATIN.test(name)) continue;
    for (const [script, test] of LOOKALIKES) if (test.test(name)) found.add(script);
  }
  return [...found];
}

function parsed(href) {
  try {
    return new URL(href);
  } catch {
    return null;
  }
}

/** Where a link goes, for its badge: `{ host, mixed }` (the host as the browser resolves it,
 * punycode for a name that is not ASCII; the scripts a label mixes with Latin), or null when
 * the link's text is exactly its target, in ASCII, and nothing in it is mixed. */
export function linkTarget(href, text) {
  const url = parsed(href);
  if (!url) return null;
  let host = url.host;
  if (url.protocol === "mailto:") {
    const address = decodeURIComponent(url.pathname);
    host = parsed(`http://${address.slice(address.lastIndexOf("@") + 1)}`)?.host ?? "";
  }
  if (!host) return null;
  const mixed = mixedScripts(host);
  const shown = text.trim();
  const same = [shown, `http://${shown}`, `mailto:${shown}`].some((c) => parsed(c)?.href === url.href);
  if (same && !mixed.length && shown.toLowerCase().includes(host.toLowerCase())) return null;
  return { host, mixed };
}

/** A badge after every link under `root` whose text is not exactly where it goes: "↗ host",
 * "⚠ ↗ xn--…" for a name that mixes scripts. */
export function markLinks(root) {
  for (const link of root.querySelectorAll("a[href]")) {
    const target = linkTarget(link.getAttribute("href"), link.textContent);
    if (!target) continue;
    const badge = document.createElement("span");
    badge.className = target.mixed.length ? "link-host confusable" : "link-host";
    const warnings = LOOKALIKES.filter(([script]) => target.mixed.includes(script)).map(([, , warning]) => warning);
    badge.title = [`${fmt(t("This link goes to %(host)s"), { host: target.host })}.`, ...warnings].join(" ");
    badge.textContent = `${target.mixed.length ? "⚠ " : ""}↗ ${target.host}`;
    link.after(badge);
  }
}

// ---- copying ---------------------------------------------------------------------------------------

// A selection copied from the page gives the text as it was sent: each marker its characters,
// no link badges. Read as the page lays it out (innerText of the selection, put beside where
// it was so that the same styles apply), so that lines and paragraphs stay as copied.
document.addEventListener("copy", (event) => {
  const selection = document.getSelection();
  if (!selection || selection.isCollapsed || !event.clipboardData) return;
  const range = selection.getRangeAt(0);
  const contents = range.cloneContents();
  if (!contents.querySelector(".hidden-char, .link-host")) return;
  for (const badge of contents.querySelectorAll(".link-host")) badge.remove();
  for (const mark of contents.querySelectorAll(".hidden-char")) mark.replaceWith(markedText(mark));
  let host = range.commonAncestorContainer;
  if (host.nodeType !== Node.ELEMENT_NODE) host = host.parentElement;
  while (host.parentElement && getComputedStyle(host).display === "contents") host = host.parentElement;
  if (host === document.documentElement) host = document.body;
  const shell = host.cloneNode(false);
  shell.removeAttribute("id");
  shell.append(contents);
  host.after(shell);
  const text = shell.innerText;
  shell.remove();
  event.clipboardData.setData("text/plain", text);
  event.preventDefault();
});
