/**
 * stream_list.js — the streams list stays live.
 *
 * The page is server-rendered (filters and keyset pages through htmx). This module follows
 * /ws/streams/ (JSON frames, resumed by streamclient.js) and:
 * - updates the cells of rows already on the page from the changed fields (textContent only);
 * - when a stream it has not shown appears on the newest page, asks the server for the rows
 *   newer than the newest one shown *with the current filters* (`?…&after=<id>`, the rows
 *   partial), so what appears is exactly what the filters select — the server stays the one
 *   place that filters and renders rows.
 */
import { connectStream } from "./streamclient.js";

const MAX_ROWS = 200; // live inserts beyond this drop the oldest rows of the page
const FETCH_GAP_MS = 400; // at most ~2 row fetches a second, however busy the server

const results = () => document.getElementById("results");
const live = document.getElementById("list-live");

function formatCount(n) {
  return Number(n).toLocaleString("en-US").replace(/,/g, "\u202f");
}

function formatDuration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(2)} s`;
  const total = Math.round(s);
  return `${Math.floor(total / 60)} min ${String(total % 60).padStart(2, "0")} s`;
}

function cell(row, field) {
  return row.querySelector(`[data-f="${field}"]`);
}

/** Apply changed fields to a row rendered by templates/streams/stream_row.html. */
function updateRow(row, item) {
  if ("status" in item) {
    const badge = cell(row, "status");
    badge.textContent = item.status;
    badge.className = `badge ${item.status}`;
    row.className = row.className.replace(/\bstatus-\S+/, `status-${item.status}`);
  }
  if ("resolved_model" in item) {
    const requested = row.querySelector("td.model > span:first-child").textContent;
    const resolved = item.resolved_model || "";
    cell(row, "resolved_model").textContent =
      resolved && resolved !== requested ? ` → ${resolved}` : "";
  }
  if ("ttft_ms" in item) {
    cell(row, "ttft_ms").textContent = item.ttft_ms === null ? "—" : String(Math.round(item.ttft_ms));
  }
  if ("duration_ms" in item) cell(row, "duration_ms").textContent = formatDuration(item.duration_ms);
  if ("event_count" in item) cell(row, "event_count").textContent = formatCount(item.event_count);
  if ("findings_count" in item || "error_findings" in item) {
    const td = cell(row, "findings_count");
    const count = item.findings_count ?? Number(td.textContent.replace(/\D/g, "") || 0);
    const errors = item.error_findings ?? (td.querySelector(".sev-error") ? 1 : 0);
    const span = document.createElement("span");
    span.className = errors ? "sev-error" : count ? "sev-warning" : "muted";
    span.textContent = String(count);
    td.replaceChildren(span);
  }
  if ("status" in item) {
    row.classList.remove("is-new");
    void row.offsetWidth; // restart the highlight
    row.classList.add("is-new");
  }
}

let fetching = false;
let again = false;
let lastFetch = 0;

function scheduleFetch() {
  if (fetching) {
    again = true;
    return;
  }
  const wait = Math.max(0, lastFetch + FETCH_GAP_MS - performance.now());
  fetching = true;
  setTimeout(fetchNewRows, wait);
}

/** Rows newer than the newest shown, filtered by the server; then prepend them. */
async function fetchNewRows() {
  const section = results();
  try {
    if (!section || section.dataset.live !== "on") return;
    const query = section.dataset.query;
    const newest = section.dataset.newest;
    const params = new URLSearchParams(query);
    let target = "results";
    if (newest) {
      params.set("after", newest);
      target = "streams";
    }
    lastFetch = performance.now();
    const response = await fetch(`/?${params}`, {
      headers: { "HX-Request": "true", "HX-Target": target },
      credentials: "same-origin",
    });
    if (!response.ok) return;
    const html = await response.text();
    if (section !== results()) return; // the filters changed meanwhile
    const tpl = document.createElement("template");
    tpl.innerHTML = html; // server-rendered, escaped by Django's templates
    if (target === "results") {
      const fresh = tpl.content.querySelector("#results");
      if (fresh && fresh.querySelector("tbody tr")) {
        section.replaceWith(fresh);
        window.htmx?.process(fresh);
      }
      return;
    }
    const rows = [...tpl.content.querySelectorAll("tr[id^='stream-row-']")];
    const body = section.querySelector("#streams");
    let max = Number(newest);
    const fresh = document.createDocumentFragment();
    for (const row of rows) {
      const id = Number(row.dataset.id);
      max = Math.max(max, id);
      const old = document.getElementById(row.id);
      if (old) old.replaceWith(row);
      else {
        row.classList.add("is-new");
        fresh.append(row);
      }
    }
    body.prepend(fresh);
    section.dataset.newest = String(max);
    section.querySelector(".empty")?.remove();
    trim(section);
    if (rows.length >= 50) again = true; // a burst: there may be more
  } finally {
    fetching = false;
    if (again) {
      again = false;
      scheduleFetch();
    }
  }
}

/** Keep the live page bounded; the "Older" link continues after the last row kept. */
function trim(section) {
  const rows = section.querySelectorAll("#streams > tr");
  if (rows.length <= MAX_ROWS) return;
  for (const row of [...rows].slice(MAX_ROWS)) row.remove();
  const last = section.querySelector("#streams > tr:last-child");
  const older = section.querySelector('a[rel="next"]');
  if (last && older) {
    for (const attr of ["href", "hx-get"]) {
      const url = new URL(older.getAttribute(attr), location.href);
      url.searchParams.set("before", last.dataset.id);
      older.setAttribute(attr, `${url.pathname}${url.search}`);
    }
    window.htmx?.process(older);
  }
}

function onFrame(frame) {
  const section = results();
  if (!section || !frame || !Array.isArray(frame.streams)) return;
  const newest = Number(section.dataset.newest || 0);
  let unseen = false;
  for (const item of frame.streams) {
    const row = document.getElementById(`stream-row-${item.id}`);
    if (row) updateRow(row, item);
    else if (item.id > newest) unseen = true;
  }
  if (unseen && section.dataset.live === "on") scheduleFetch();
}

function setLive(state, text) {
  if (!live) return;
  live.dataset.state = state;
  live.textContent = text;
}

// Whole rows are links (the #id cell holds the real one, for keyboards and new tabs).
document.addEventListener("click", (event) => {
  const row = event.target.closest("table.streams tbody tr[data-id]");
  if (!row || event.target.closest("a, button, input, select")) return;
  const link = row.querySelector("a.row-link");
  if (!link) return;
  if (event.metaKey || event.ctrlKey) window.open(link.href, "_blank", "noopener");
  else window.location.assign(link.href);
});

const section = results();
if (section) {
  const newest = section.dataset.newest;
  connectStream(`/ws/streams/?format=json${newest ? `&after=${newest}` : ""}`, {
    onFrame,
    onOpen: () => setLive("live", "live"),
    onClose: (info) => {
      if (info.willRetry) setLive("retrying", "reconnecting…");
    },
    onEnd: (info) => setLive("off", info.reason === "refused" ? "live updates unavailable" : ""),
  });
  setLive("connecting", "connecting…");
}
