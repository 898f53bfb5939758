/**
 * palette.js — one colour per model, the same on every page and chart. An ES module.
 *
 * The palette is Okabe & Ito's, made for colour-vision deficiencies (its yellow darkened to
 * read on white), extended by two of Paul Tol's muted colours. A model's colour comes from a
 * hash of its name (FNV-1a, then murmur3's finaliser), so it needs no list and never changes between pages; two
 * models can share a colour only when there are more models than colours or their hashes
 * meet (the simulator's six names, auto included, all differ).
 *
 *   import { colorFor, alpha } from "/static/js/palette.js";
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

/** The colour of a model (any string; the empty name too). */
export function colorFor(name) {
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
  return PALETTE[(h >>> 0) % PALETTE.length];
}

/** `hex` (#rrggbb) with opacity `a`. */
export function alpha(hex, a) {
  const n = Number.parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${a})`;
}
