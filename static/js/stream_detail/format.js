/**
 * Figures formatted as dashboard/templatetags/inspection.py formats them, for what only the
 * client knows (live counts, the chart's axes and captions, replay progress).
 */

const thin = (s) => s.replace(/,/g, "\u202f");

export function fmtMs(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  const a = Math.abs(v);
  if (a < 10) return v.toFixed(2);
  if (a < 1000) return v.toFixed(1);
  return thin(Math.round(v).toLocaleString("en-US"));
}

/** A gap between events for prose: µs below a millisecond. */
export function fmtGap(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return `${Math.round(v * 1000)} µs`;
  return `${fmtMs(v)} ms`;
}

export function fmtDuration(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1000) return `${Math.round(v)} ms`;
  const s = v / 1000;
  if (s < 60) return `${s.toFixed(2)} s`;
  const total = Math.round(s);
  return `${Math.floor(total / 60)} min ${String(total % 60).padStart(2, "0")} s`;
}

export function fmtCount(v) {
  if (v === null || v === undefined) return "—";
  return thin(Number(v).toLocaleString("en-US"));
}
