/**
 * palette.js — one colour per model, the same on every page and chart. An ES module.
 *
 * The palette is Okabe & Ito's, made for colour-vision deficiencies (its yellow darkened to
 * read on white), extended by two of Paul Tol's muted colours. A model's colour comes from a
 * hash of its name (FNV-1a, then murmur3's finaliser), so it needs no list and never changes between pages; two
 * models can share a colour only when there are more models than colours or their hashes
 * meet (the simulator's six names, auto included, all differ).
 *
 * The dark theme has its own variant, PALETTE_DARK: the same hues in the same order, lightened
 * where they vanished on the dark background (blue, yellow, indigo, wine, black turned
 * off-white), each at least 3:1 against the dark card and, simulated for protan-, deutan- and
 * tritanopia, at least as far apart as the light ones. app.css holds both as --model-0…9 (its
 * light and dark sets; keep them equal to these, tests/e2e/test_theme_e2e.py checks), and
 * colorFor reads the one in effect.
 *
 *   import { colorFor, colorVar, alpha, cssColor, onThemeChange } from "/static/js/palette.js";
 */
export const PALETTE = [
  "#0072B2", // blue
  "#E69F00", // orange
  "#009E73", // bluish green
  "#D55E00", // vermillion
  "#CC79A7", // reddish purple
  "#56B4E9", // sky blue
  "#8C6D00", // dark yellow (Okabe-Ito's #F0E442 is unreadable on white)
  "#332288", // indigo (Tol)
  "#882255", // wine (Tol)
  "#000000", // black
];

/** The dark theme's palette, index for index. */
export const PALETTE_DARK = [
  "#3A8FD6", // blue, lighter
  "#E69F00", // orange
  "#00B386", // bluish green, lighter
  "#E8702A", // vermillion, lighter
  "#CC79A7", // reddish purple
  "#8FD3F7", // sky blue, lighter (apart from the blue)
  "#F0E442", // yellow: Okabe-Ito's own, which reads on dark
  "#B7A9FF", // indigo, as a lavender
  "#A8437A", // wine, lighter
  "#E8ECF3", // black's place: off-white
];

/** A model's place in the palette (any string; the empty name too). */
export function colorIndex(name) {
  // FNV-1a's offset basis + 15: with it the simulator's six names (auto included) get six
  // different colours; any basis is as stable, this one suits the demo
  let h = (0x811c9dc5 + 15) >>> 0;
  const s = String(name ?? "");
  for (let i = 0; i < s.length; i += 1) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // murmur3's finaliser: FNV-1a alone left similar names (…-coder, …-reasoner) in one colour
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return (h >>> 0) % PALETTE.length;
}

/** A colour of the theme in effect: app.css's custom property `--${name}` (computed on <html>),
 * else `fallback`. For canvas drawing; DOM styles can use var(--name) and follow by themselves. */
export function cssColor(name, fallback = "") {
  if (typeof document === "undefined") return fallback;
  return getComputedStyle(document.documentElement).getPropertyValue(`--${name}`).trim() || fallback;
}

/** Whether the dark colours are in effect (the toggle's choice, else the system's). */
export function isDark() {
  return typeof document !== "undefined" &&
    getComputedStyle(document.documentElement).colorScheme === "dark";
}

/** The colour of a model in the theme in effect, as #rrggbb (canvas, alpha()). */
export function colorFor(name) {
  const i = colorIndex(name);
  return cssColor(`model-${i}`, (isDark() ? PALETTE_DARK : PALETTE)[i]);
}

/** The colour of a model for a DOM style: follows theme changes without a redraw. */
export function colorVar(name) {
  const i = colorIndex(name);
  return `var(--model-${i}, ${PALETTE[i]})`;
}

/** Run `redraw` whenever the theme in effect changes (static/js/theme.js). */
export function onThemeChange(redraw) {
  document.addEventListener("streamscope:theme", () => redraw());
}

/** `hex` (#rrggbb) with opacity `a`. */
export function alpha(hex, a) {
  const n = Number.parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}
