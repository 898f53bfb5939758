/**
 * stream_list.js — the streams list stays live.
 *
 * The page is server-rendered (filters and keyset pages through htmx), and so is every row it
 * shows: templates/streams/stream_row.html is the one row renderer, and no figure is
 * formatted here. This module follows /ws/streams/ (JSON frames, resumed by streamclient.js)
 * and asks the rows partial of the list view (`?<filters>&fragment=streams&after=…|before=…`,
 * the same filters, the same keyset cursors as its pages) for what changed:
 * - a row already on the page: its status badge changes at once (the raw status, as
 *   textContent), and the row is fetched again, throttled, through a cursor next to it (the
 *   row below it, `after=`; the bottom row: the row above it, `before=`); the cells that
 *   differ are swapped for the server's;
 * - a stream it has not shown, on the newest page: the rows newer than the newest one shown,
 *   so what appears is exactly what the filters select; they are prepended.
 * A stream that finishes changes its status: its row comes again with its Tokens and Cost
 * cells (the frame's `usage` and `cost`, as the server labels them: estimate, no price).
 * The ticks of "Compare the two ticked" are kept by stream id and put back whenever rows are
 * rendered again (a filter, the search box's own change event, a page, a row fetched anew).
 */
import { t } from "./i18n.js";
import { connectStream } from "./streamclient.js";
import { statusWord } from "./vocabulary.js";

const MAX_ROWS = 200; // live inserts beyond this drop the oldest rows of the page
const FETCH_GAP_MS = 400; // at most ~2 row fetches a second, however busy the server

const results = () => document.getElementById("results");
const live = document.getElementById("list-live");

// Rows whose stream changed since they were rendered: id -> the frame count when it changed.
const dirty = new Map();
let frames = 0;
let unseen = false; // a stream newer than the newest row was announced
let servedNew = false; // the last request was for new rows: changed rows go next

/** The status, at once: the frame's value as a word of the page's language (its class keeps
 * the value). */
function setStatus(row, status) {
  const badge = row.querySelector('[data-f="status"]');
  if (!badge || badge.classList.contains(status)) return;
  badge.textContent = statusWord(status);
  badge.className = `badge ${status}`;
  row.className = row.className.replace(/\bstatus-\S+/, `status-${status}`);
  row.classList.remove("is-new");
  void row.offsetWidth; // restart the highlight
  row.classList.add("is-new");
}

/** Bring a row up to the server's rendering of it: only the cells that differ are swapped. */
function patch(row, fresh) {
  const cells = [...row.children];
  const freshCells = [...fresh.children];
  fresh.classList.toggle("is-new", row.classList.contains("is-new"));
  if (cells.length !== freshCells.length) {
    row.replaceWith(fresh);
    return;
  }
  row.className = fresh.className;
  cells.forEach((td, i) => {
    if (td.innerHTML !== freshCells[i].innerHTML) td.replaceWith(freshCells[i]);
  });
}

// Ticked rows (input.pick, "Compare the two ticked"), by stream id, for the page's life.
const ticked = new Set();
document.addEventListener("change", (event) => {
  const box = event.target;
  if (!(box instanceof HTMLInputElement) || !box.classList.contains("pick")) return;
  if (box.checked) ticked.add(box.value);
  else ticked.delete(box.value);
});
function retick() {
  document.querySelectorAll("input.pick").forEach((box) => {
    box.checked = ticked.has(box.value);
  });
}
document.addEventListener("htmx:afterSwap", retick);

let fetching = false;
let lastFetch = 0;

function scheduleFetch() {
  if (fetching) return; // the running fetch looks again when it is done
  const wait = Math.max(0, lastFetch + FETCH_GAP_MS - performance.now());
  fetching = true;
  setTimeout(fetchRows, wait);
}

/** What to ask next: new rows or a window around the lowest changed row, taking turns (a
 * steady flow of new streams must not keep the rows on the page from updating). */
function nextRequest(section) {
  const newest = section.dataset.newest;
  if (unseen && section.dataset.live !== "on") unseen = false;
  if (unseen && !(servedNew && dirty.size)) {
    unseen = false;
    servedNew = true;
    if (!newest) return { fragment: "results" };
    return { fragment: "streams", after: newest };
  }
  servedNew = false;
  const rows = [...section.querySelectorAll("#streams > tr")].filter((r) => dirty.has(Number(r.dataset.id)));
  for (const id of dirty.keys()) {
    if (!document.getElementById(`stream-row-${id}`)) dirty.delete(id); // trimmed or filtered away
  }
  const lowest = rows.at(-1);
  if (!lowest) return null;
  const below = lowest.nextElementSibling;
  const above = lowest.previousElementSibling;
  const cursor = below ? { after: below.dataset.id } : above ? { before: above.dataset.id } : {};
  return { fragment: "streams", target: Number(lowest.dataset.id), ...cursor };
}

/** One request for rows with the page's filters, merged into the page; then the next, if any. */
async function fetchRows() {
  const section = results();
  try {
    const request = section && nextRequest(section);
    if (!request) return;
    const { target, ...cursor } = request;
    const params = new URLSearchParams(section.dataset.query);
    for (const [key, value] of Object.entries(cursor)) params.set(key, value);
    const asked = frames;
    lastFetch = performance.now();
    const response = await fetch(`/?${params}`, { credentials: "same-origin" });
    if (target !== undefined && dirty.get(target) <= asked) dirty.delete(target); // (even if not sent back: filtered out)
    if (!response.ok) return;
    const html = await response.text();
    if (section !== results()) return; // the filters changed meanwhile
    const tpl = document.createElement("template");
    tpl.innerHTML = html; // server-rendered, escaped by Django's templates
    if (cursor.fragment === "results") {
      const fresh = tpl.content.querySelector("#results");
      if (fresh && fresh.querySelector("tbody tr")) {
        section.replaceWith(fresh);
        window.htmx?.process(fresh);
      }
      return;
    }
    const rows = [...tpl.content.querySelectorAll("tr[id^='stream-row-']")];
    merge(section, rows, asked);
    if (target === undefined && rows.length >= 50) unseen = true; // a burst: there may be more
  } catch {
    // the network or the server failed this once: the next change asks again
  } finally {
    fetching = false;
    retick();
    if (unseen || dirty.size) scheduleFetch();
  }
}

/** Fresh rows from the server: update those on the page, prepend those newer than the newest. */
function merge(section, rows, asked) {
  const body = section.querySelector("#streams");
  const newest = Number(section.dataset.newest || 0);
  let max = newest;
  const fresh = document.createDocumentFragment();
  for (const row of rows) {
    const id = Number(row.dataset.id);
    const old = document.getElementById(row.id);
    if (old) {
      // A row that changed after the request went out is newer on the page than in this answer.
      if ((dirty.get(id) ?? -1) > asked) continue;
      dirty.delete(id);
      patch(old, row);
    } else if (id > newest) {
      max = Math.max(max, id);
      row.classList.add("is-new");
      fresh.append(row);
    }
  }
  if (!fresh.childNodes.length) return;
  body.prepend(fresh);
  section.dataset.newest = String(max);
  section.querySelector(".empty")?.remove();
  trim(section);
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
  frames += 1;
  const newest = Number(section.dataset.newest || 0);
  for (const item of frame.streams) {
    const row = document.getElementById(`stream-row-${item.id}`);
    if (row) {
      if (typeof item.status === "string") setStatus(row, item.status);
      dirty.set(item.id, frames);
    } else if (item.id > newest && section.dataset.live === "on") {
      unseen = true;
    }
  }
  if (unseen || dirty.size) scheduleFetch();
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
  // the page's project only (none: staff looking at every project)
  const project = section.dataset.project;
  const query = `${newest ? `&after=${newest}` : ""}${project ? `&project=${encodeURIComponent(project)}` : ""}`;
  connectStream(`/ws/streams/?format=json${query}`, {
    onFrame,
    onOpen: () => setLive("live", t("live")),
    onClose: (info) => {
      if (info.willRetry) setLive("retrying", t("reconnecting…"));
    },
    onEnd: (info) =>
      setLive("off", { refused: t("live updates unavailable"), signed_out: t("signed out") }[info.reason] ?? ""),
  });
  setLive("connecting", t("connecting…"));
}
