/**
 * time.js — the one way scripts write a moment: in the page's time zone and the forms of its
 * language, 24-hour, the zone named, as the server's templates write them (English
 * "2026-12-01 14:02:49 CET", Dutch "1-12-2026 14:02:49 CET"). The zone is the one the server
 * rendered the page in (`<html data-time-zone>`, dashboard/timezone.py; UTC without one), so a
 * chart's times and the tables beside it agree; the forms and the months' abbreviations are
 * the server's too (dashboard/dates.py, through the vocabulary), written here letter by letter
 * as Django writes them. An ES module.
 * uPlot's time axes use these too (zoneAxis), instead of its local "8:00am" and "12-05".
 */
import { t as word } from "./i18n.js";
import { VOCABULARY } from "./vocabulary.js";

const pad = (n) => String(n).padStart(2, "0");
const { forms: FORMS, months: MONTHS } = VOCABULARY.dates;

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

// The page zone's abbreviations by UTC offset ({"3600": "CET", "7200": "CEST"}), the server's
// (dashboard/timezone.py abbreviations): a time's zone is named as the templates name it,
// where Intl's own short names depend on the language ("GMT+1" in English).
const ZONE_NAMES = (() => {
  try {
    return JSON.parse(document.documentElement.dataset.zoneNames || "{}");
  } catch {
    return {};
  }
})();
const formats = new Map();

/** The parts of `t` (epoch seconds) in `zone`, as numbers, and the zone's short name. */
function parts(t, zone = pageZone()) {
  let f = formats.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric",
      hour: "numeric", minute: "numeric", second: "numeric", timeZoneName: "longOffset",
    });
    formats.set(zone, f);
  }
  const out = {};
  for (const p of f.formatToParts(new Date(t * 1000))) out[p.type] = p.value;
  const offset = /GMT([+-])(\d{2}):(\d{2})/.exec(out.timeZoneName);
  const seconds = offset ? (offset[1] === "-" ? -1 : 1) * (offset[2] * 3600 + offset[3] * 60) : 0;
  return {
    year: Number(out.year), month: Number(out.month), day: Number(out.day),
    hour: Number(out.hour) % 24, minute: Number(out.minute), second: Number(out.second),
    zone: zone === "UTC" ? "UTC" : ZONE_NAMES[seconds] || out.timeZoneName,
  };
}

// Django's date format letters the server's forms use (dashboard/dates.py LETTERS: the same)
const LETTERS = {
  Y: (p) => String(p.year).padStart(4, "0"),
  m: (p) => pad(p.month),
  n: (p) => String(p.month),
  d: (p) => pad(p.day),
  j: (p) => String(p.day),
  b: (p) => MONTHS[p.month - 1],
  M: (p) => MONTHS[p.month - 1].charAt(0).toUpperCase() + MONTHS[p.month - 1].slice(1),
  H: (p) => pad(p.hour),
  i: (p) => pad(p.minute),
  s: (p) => pad(p.second),
};

/** `p` (parts) in the form `name` of the page's language ("minute": "2026-12-01 13:02"). */
function write(name, p) {
  let text = "";
  let escaped = false;
  for (const ch of FORMS[name]) {
    if (escaped) {
      text += ch;
      escaped = false;
    } else if (ch === "\\") {
      escaped = true;
    } else {
      text += Object.hasOwn(LETTERS, ch) ? LETTERS[ch](p) : ch;
    }
  }
  return text;
}

/** "2026-12-01 13:02 CET" (Dutch "1-12-2026 13:02 CET"; with `seconds`, "13:02:49") in the
 * page's zone; `t` in epoch seconds. */
export function fmtTime(t, { seconds = false, zone = true } = {}) {
  const p = parts(t);
  const text = write(seconds ? "second" : "minute", p);
  return zone ? `${text} ${p.zone}` : text;
}

/** The zone's short name at `t` (now without one): "CET", "CEST", "UTC", "IST". */
export function zoneName(t = Date.now() / 1000) {
  return parts(t).zone;
}

/** Tick labels of a uPlot time axis in the page's zone and language, 24-hour: the day where a
 * day starts (or at the first tick: "Dec 5", Dutch "5 dec"), the hour and minute otherwise;
 * seconds only when ticks are that close. */
export function zoneTicks(u, splits, axisIdx, foundSpace, foundIncr) {
  let lastDay = null;
  return splits.map((t) => {
    if (t === null || t === undefined) return "";
    const p = parts(t);
    const day = write("axis_day", p);
    const clock = `${pad(p.hour)}:${pad(p.minute)}` + (foundIncr < 60 ? `:${pad(p.second)}` : "");
    const newDay = day !== lastDay;
    lastDay = day;
    if (foundIncr >= 86400) return day;
    return newDay ? `${day}\n${clock}` : clock;
  });
}

/** A uPlot time axis and x series in the page's zone: spread into the options. `label`: the
 * axis's name, the zone named after it ("time (Europe/Amsterdam)", Dutch "tijd (…)"). */
export function zoneAxis(uPlot, label = word("time")) {
  const zone = pageZone();
  const named = `${label} (${zone})`;
  return {
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), zone === "UTC" ? "Etc/UTC" : zone),
    axis: { label: named, values: zoneTicks, space: 70 },
    series: { label: named, value: (u, v) => (v === null || v === undefined ? "" : fmtTime(v)) },
  };
}
