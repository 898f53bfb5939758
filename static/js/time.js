/**
 * time.js — the one way pages write a moment: 24-hour, in the page's time zone, the zone named
 * (as the server's templates do: "2026-12-01 14:02:49 CET"). The zone is the one the server
 * rendered the page in (`<html data-time-zone>`, dashboard/timezone.py; UTC without one), so a
 * chart's times and the tables beside it agree. An ES module.
 * uPlot's time axes use these too (zoneAxis), instead of its local "8:00am".
 */
import { t as word } from "./i18n.js";

const pad = (n) => String(n).padStart(2, "0");

/** The page's IANA time zone ("UTC" when it names none, or one this browser does not know). */
export function pageZone() {
  const zone = document.documentElement.dataset.timeZone || "UTC";
  try {
    new Intl.DateTimeFormat("en", { timeZone: zone });
    return zone;
  } catch {
    return "UTC";
  }
}

const LANG = document.documentElement.lang || "en";
const formats = new Map();

/** Intl parts of `t` (epoch seconds) in `zone`: {year, month, day, hour, minute, second, zone}. */
function parts(t, zone = pageZone()) {
  let f = formats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat(LANG, {
      timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric",
      hour: "numeric", minute: "numeric", second: "numeric", timeZoneName: "short",
    });
    formats.set(zone, f);
  }
  const out = {};
  for (const p of f.formatToParts(new Date(t * 1000))) out[p.type] = p.value;
  return {
    year: out.year, month: pad(out.month), day: pad(out.day),
    hour: pad(Number(out.hour) % 24), minute: pad(out.minute), second: pad(out.second),
    zone: zone === "UTC" ? "UTC" : out.timeZoneName,
  };
}

/** "2026-12-01 13:02 CET" (with `seconds`, "13:02:49") in the page's zone; `t` in epoch
 * seconds. */
export function fmtTime(t, { seconds = false, zone = true } = {}) {
  const p = parts(t);
  let text = `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
  if (seconds) text += `:${p.second}`;
  return zone ? `${text} ${p.zone}` : text;
}

/** The zone's short name at `t` (now without one): "CET", "CEST", "UTC", "GMT+5:30". */
export function zoneName(t = Date.now() / 1000) {
  return parts(t).zone;
}

/** Tick labels of a uPlot time axis in the page's zone, 24-hour: the date where a day starts
 * (or at the first tick), the hour and minute otherwise; seconds only when ticks are that
 * close. */
export function zoneTicks(u, splits, axisIdx, foundSpace, foundIncr) {
  let lastDay = null;
  return splits.map((t) => {
    if (t === null || t === undefined) return "";
    const p = parts(t);
    const day = `${p.month}-${p.day}`;
    const clock = `${p.hour}:${p.minute}` + (foundIncr < 60 ? `:${p.second}` : "");
    const newDay = day !== lastDay;
    lastDay = day;
    if (foundIncr >= 86400) return day;
    return newDay ? `${day}\n${clock}` : clock;
  });
}

/** A uPlot time axis and x series in the page's zone: spread into the options. `label` is
 * the axis's word ("time"), the zone named after it. */
export function zoneAxis(uPlot, label = word("time")) {
  const zone = pageZone();
  const named = `${label} (${zone})`;
  return {
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), zone === "UTC" ? "Etc/UTC" : zone),
    axis: { label: named, values: zoneTicks, space: 70 },
    series: { label: named, value: (u, v) => (v === null || v === undefined ? "" : fmtTime(v)) },
  };
}

// the names from when every page was in UTC (charts.js imports utcAxis): in the page's zone now
export const fmtUtc = fmtTime;
export const utcTicks = zoneTicks;
export const utcAxis = zoneAxis;
