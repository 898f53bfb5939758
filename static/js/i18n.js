/**
 * i18n.js — the scripts' words and figures in the page's language. An ES module.
 *
 * Words come from Django's JavaScript catalog (/jsi18n/, JavaScriptCatalog, loaded by
 * base.html before every other script: window.gettext, ngettext, interpolate); without it
 * (a page that does not load it) they stay English. Figures follow the page's language
 * (<html lang>): a decimal comma in Dutch. Thousands are grouped with a narrow no-break space in
 * every language, as the server's `count` filter writes them (dashboard/templatetags).
 *
 *   import { t, tn, fmt, num, dec, count, ms, pct } from "./i18n.js";
 *   t("No output.")
 *   fmt(tn("%(n)s event", "%(n)s events", n), { n: count(n) })
 *   num(12.345, 1)  // "12.3", in Dutch "12,3"; num(1234.5, 1) "1 234.5" ("1 234,5")
 *
 * Only the scripts' own words go through here, never data: event types, model ids, model
 * output, prompts and finding codes are shown as they came. A status's word is the server's
 * translated label (vocabulary.js statusWord). `t` and `tn` are extracted by
 * `makemessages -d djangojs` (dashboard/management/commands/makemessages.py adds them to
 * xgettext's keywords); their arguments must be string literals.
 */

/** The page's language, as the server rendered it (`<html lang="nl">`). */
export const LANG = document.documentElement.lang || "en";

const catalog = globalThis;

/** `text` in the page's language. */
export function t(text) {
  return typeof catalog.gettext === "function" ? catalog.gettext(text) : text;
}

/** The singular or plural of a phrase for `n`, in the page's language. */
export function tn(singular, plural, n) {
  if (typeof catalog.ngettext === "function") return catalog.ngettext(singular, plural, n);
  return n === 1 ? singular : plural;
}

/** `template` with its `%(name)s` placeholders filled from `values` (already formatted). */
export function fmt(template, values) {
  if (typeof catalog.interpolate === "function") return catalog.interpolate(template, values, true);
  return template.replace(/%\(([^)]+)\)s/g, (_, key) => String(values[key]));
}

const THIN = "\u202f";
const formats = new Map();

function formatter(min, max) {
  const key = `${min}:${max}`;
  let f = formats.get(key);
  if (!f) {
    // "always": Intl's "min2" in some languages leaves 4-digit figures ungrouped ("1981")
    f = new Intl.NumberFormat(LANG, {
      minimumFractionDigits: min,
      maximumFractionDigits: max,
      useGrouping: "always",
    });
    formats.set(key, f);
  }
  return f;
}

function write(f, x) {
  return f
    .formatToParts(x)
    .map((p) => (p.type === "group" ? THIN : p.value))
    .join("");
}

const finite = (x) => typeof x === "number" && Number.isFinite(x);

/** `x` with exactly `digits` decimals, in the page's language, thousands grouped as every
 * figure is ("" for no number). */
export function num(x, digits = 0) {
  return finite(x) ? write(formatter(digits, digits), x) : "";
}

/** `x` with at most `maxDigits` decimals (no trailing zeros), in the page's language. */
export function dec(x, maxDigits = 3) {
  return finite(x) ? write(formatter(0, maxDigits), x) : "";
}

/** A whole number, grouped ("12 345"); "" for none. */
export function count(x) {
  const n = typeof x === "string" && x !== "" ? Number(x) : x;
  return finite(n) ? num(n) : "";
}

/** The places an amount of money is shown with: two from 1 on, else three significant digits
 * (a stream costs fractions of a cent), at most nine (the stored nano-units). Kept equal to
 * the server's `money` filter (dashboard/templatetags/inspection.py). */
export function moneyPlaces(amount) {
  const a = Math.abs(amount);
  if (a >= 1 || a === 0) return 2;
  return Math.min(9, Math.max(2, 2 - Math.floor(Math.log10(a))));
}

const SYMBOLS = { EUR: "€", USD: "$" };

/** Integer `nanos` rounded to `places` decimals of its unit, half to even, from the integer
 * (as the server's `money` filter rounds: a float's binary error never decides a digit). */
function roundNanos(nanos, places) {
  const unit = 10 ** (9 - places);
  const whole = Math.floor(nanos / unit);
  const rest = nanos - whole * unit;
  const up = 2 * rest > unit || (2 * rest === unit && whole % 2 !== 0);
  return (whole + (up ? 1 : 0)) / 10 ** places;
}

/** A cost stored as nano-units of `currency` ("€0.00123", Dutch "€ 0,00123"); "" for none. */
export function money(nanos, currency) {
  if (!finite(nanos) || !currency) return "";
  const places = moneyPlaces(nanos / 1e9);
  const symbol = SYMBOLS[currency] || `${currency} `;
  const space = LANG.startsWith("nl") && symbol.length === 1 ? "\u00a0" : "";
  return `${symbol}${space}${num(roundNanos(Math.round(nanos), places), places)}`;
}

/** A time in milliseconds: "850 ms", from a second on "1.25 s" ("1,25 s"); "" for none. */
export function ms(x) {
  if (!finite(x)) return "";
  return x >= 1000 ? `${num(x / 1000, 2)} s` : `${num(Math.round(x))} ms`;
}

/** A percentage with `digits` decimals: "12.5 %" ("12,5 %"); "" for none. */
export function pct(x, digits = 1) {
  return finite(x) ? `${num(x, digits)} %` : "";
}
