/**
 * time.js — the one way pages write a moment: 24-hour, in UTC, the zone named (as the server's
 * templates do: "2026-12-01 13:02:49 UTC", column heads "(UTC)"). An ES module.
 * uPlot's time axes use these too (utcAxis), instead of its local "8:00am".
 */
const pad = (n) => String(n).padStart(2, "0");

/** "2026-12-01 13:02 UTC" (with `seconds`, "13:02:49"); `t` in epoch seconds. */
export function fmtUtc(t, { seconds = false, zone = true } = {}) {
  const d = new Date(t * 1000);
  let text = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
    `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
  if (seconds) text += `:${pad(d.getUTCSeconds())}`;
  return zone ? `${text} UTC` : text;
}

/** Tick labels of a uPlot time axis in UTC, 24-hour: the date where a day starts (or at the
 * first tick), the hour and minute otherwise; seconds only when ticks are that close. */
export function utcTicks(u, splits, axisIdx, foundSpace, foundIncr) {
  let lastDay = null;
  return splits.map((t) => {
    if (t === null || t === undefined) return "";
    const d = new Date(t * 1000);
    const day = `${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
    const clock = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}` +
      (foundIncr < 60 ? `:${pad(d.getUTCSeconds())}` : "");
    const newDay = day !== lastDay;
    lastDay = day;
    if (foundIncr >= 86400) return day;
    return newDay ? `${day}\n${clock}` : clock;
  });
}

/** A uPlot time axis and x series in UTC: spread into the options. */
export function utcAxis(uPlot, label = "time (UTC)") {
  return {
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
    axis: { label, values: utcTicks, space: 70 },
    series: { label: "time (UTC)", value: (u, v) => (v === null || v === undefined ? "" : fmtUtc(v)) },
  };
}
