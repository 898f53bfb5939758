/**
 * Figures formatted as dashboard/templatetags/inspection.py formats them, for what only the
 * client knows (live counts, the chart's axes and captions, replay progress), in the page's
 * language (i18n.js: a decimal comma in Dutch; thousands in thin spaces in every language).
 */
import { count, num } from "../i18n.js";

export function fmtMs(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  const a = Math.abs(v);
  if (a < 10) return num(v, 2);
  if (a < 1000) return num(v, 1);
  return num(Math.round(v));
}

/** A gap between events for prose: µs below a millisecond. */
export function fmtGap(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return `${num(Math.round(v * 1000))} µs`;
  return `${fmtMs(v)} ms`;
}

export function fmtDuration(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1000) return `${num(Math.round(v))} ms`;
  const s = v / 1000;
  if (s < 60) return `${num(s, 2)} s`;
  const total = Math.round(s);
  return `${num(Math.floor(total / 60))} min ${String(total % 60).padStart(2, "0")} s`;
}

export function fmtCount(v) {
  if (v === null || v === undefined) return "—";
  return count(Number(v));
}
