/**
 * The event table: a scroll box of windows of 200 rows loaded by index range (never the whole
 * stream in the DOM), jump to an event, filter by type, rows open to their data. The rows are
 * the server's (stream_detail.html#event_window and #event_detail).
 */
import { el, getText, serverFragment } from "../dom.js";
import { fmt, t } from "../i18n.js";

const MAX_ROWS = 1000; // rows kept in the DOM; the far end is dropped and reloads on scroll

export class EventTable {
  /** `urls`: the page config's `events` (windows) and `event` (one event's detail) URLs. */
  constructor(urls) {
    this.urls = urls;
    this.scroll = document.getElementById("events-scroll");
    this.table = this.scroll.querySelector("table");
    this.body = document.getElementById("events-body");
    this.typeSelect = document.getElementById("event-type");
    this.range = document.getElementById("events-range");
    this.loading = null;
    this.live = false;
    // Live: the last index the page has received over the WebSocket. Rows beyond it (stored,
    // their frame not here yet) wait, so the table never shows more than the page counts.
    this.upTo = null;
    this.readState(this.body);
    this.top = el("div", "window-edge");
    this.bottom = el("div", "window-edge");
    this.top.setAttribute("aria-hidden", "true");
    this.bottom.setAttribute("aria-hidden", "true");
    this.scroll.prepend(this.top);
    this.scroll.append(this.bottom);
    this.scroll.style.overflowAnchor = "none"; // scroll position is kept by hand, below
    const observer = new IntersectionObserver(
      (entries) => {
        for (const entry of entries) {
          if (!entry.isIntersecting) continue;
          if (entry.target === this.top && this.hasBefore) this.loadBefore();
          if (entry.target === this.bottom && this.hasAfter) this.loadAfter();
        }
      },
      { root: this.scroll, rootMargin: "400px 0px" },
    );
    observer.observe(this.top);
    observer.observe(this.bottom);
    document.querySelector(".events-pager")?.querySelectorAll("a").forEach((a) => (a.hidden = true));
    this.bindControls();
    this.updateRange();
    const target = this.body.querySelector("tr.target");
    if (target) requestAnimationFrame(() => this.reveal(target, true));
  }

  readState(body) {
    const d = body.dataset;
    this.first = d.first === "" ? null : Number(d.first);
    this.last = d.last === "" ? null : Number(d.last);
    this.hasBefore = d.hasBefore === "1";
    this.hasAfter = d.hasAfter === "1";
    this.type = d.type || "";
  }

  bindControls() {
    const form = document.getElementById("events-filter");
    const at = document.getElementById("event-at");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (at.value !== "") this.jump(Number(at.value));
      else this.replace({ type: this.typeSelect.value });
    });
    this.typeSelect.addEventListener("change", () => this.replace({ type: this.typeSelect.value }));
    document.getElementById("events-first").addEventListener("click", (event) => {
      event.preventDefault();
      this.replace({ type: this.typeSelect.value });
    });
    document.getElementById("events-last").addEventListener("click", (event) => {
      event.preventDefault();
      this.replace({ type: this.typeSelect.value, tail: "1" }).then(() => {
        this.scroll.scrollTop = this.scroll.scrollHeight;
      });
    });
    this.body.addEventListener("click", (event) => {
      const row = event.target.closest("tr.event");
      if (!row || event.target.closest("a")) return;
      this.toggle(row);
    });
  }

  url(params) {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== "" && v !== null && v !== undefined) query.set(k, v);
    return `${this.urls.events}?${query}`;
  }

  async fetchWindow(params) {
    const html = await getText(this.url(params));
    return serverFragment(html).querySelector("tbody");
  }

  rows() {
    return this.body.querySelectorAll("tr.event");
  }

  /** Replace the table with a new window (filter, first, last, jump). */
  async replace(params) {
    const body = await this.fetchWindow(params);
    this.body.replaceChildren(...body.childNodes);
    this.readState(body);
    this.body.dataset.type = this.type;
    this.typeSelect.value = this.type;
    this.scroll.scrollTop = 0;
    this.updateRange();
    return body;
  }

  async loadAfter() {
    if (this.loading || this.last === null) {
      if (this.last === null && !this.loading && this.live) return this.replace({ type: this.type, tail: "1" });
      // New events (or the stream's end) while a window is on its way: read again after it,
      // or the last rows before a pause would wait for an event that may never come.
      if (this.loading === "after") this.again = true;
      return;
    }
    this.loading = "after";
    try {
      const atBottom = this.scroll.scrollHeight - this.scroll.scrollTop - this.scroll.clientHeight < 40;
      const body = await this.fetchWindow({ after: this.last, type: this.type });
      const cap = this.live && this.upTo !== null ? this.upTo : Infinity;
      const fetched = [...body.querySelectorAll("tr.event")];
      const rows = fetched.filter((r) => Number(r.dataset.index) > this.last && Number(r.dataset.index) <= cap);
      const held = fetched.some((r) => Number(r.dataset.index) > cap);
      if (rows.length) {
        this.body.querySelector("tr.no-events")?.remove();
        this.body.append(...rows);
        this.last = Number(rows.at(-1).dataset.index);
        if (this.first === null) this.first = Number(rows[0].dataset.index);
      }
      // Held rows come with their frames, which call noteNewEvents: no chase meanwhile.
      this.hasAfter = !held && body.dataset.hasAfter === "1";
      this.prune("top");
      if (atBottom && this.live) this.scroll.scrollTop = this.scroll.scrollHeight;
      this.updateRange();
    } finally {
      this.loading = null;
    }
    if (this.again) {
      this.again = false;
      return this.loadAfter();
    }
    if (this.hasAfter && this.visible(this.bottom)) this.loadAfter();
  }

  async loadBefore() {
    if (this.loading || this.first === null) return;
    this.loading = "before";
    try {
      const body = await this.fetchWindow({ before: this.first, type: this.type });
      const rows = [...body.querySelectorAll("tr.event")].filter((r) => Number(r.dataset.index) < this.first);
      if (rows.length) {
        const height = this.scroll.scrollHeight;
        this.body.prepend(...rows);
        this.scroll.scrollTop += this.scroll.scrollHeight - height;
        this.first = Number(rows[0].dataset.index);
      }
      this.hasBefore = body.dataset.hasBefore === "1";
      this.prune("bottom");
      this.updateRange();
    } finally {
      this.loading = null;
    }
  }

  /** Drop rows beyond MAX_ROWS from the far end, keeping what is on screen where it is. */
  prune(end) {
    const rows = this.rows();
    const extra = rows.length - MAX_ROWS;
    if (extra <= 0) return;
    if (end === "top") {
      const height = this.scroll.scrollHeight;
      for (let i = 0; i < extra; i++) {
        rows[i].nextElementSibling?.classList.contains("event-detail") && rows[i].nextElementSibling.remove();
        rows[i].remove();
      }
      this.scroll.scrollTop -= height - this.scroll.scrollHeight;
      this.first = Number(this.rows()[0].dataset.index);
      this.hasBefore = true;
    } else {
      for (let i = rows.length - extra; i < rows.length; i++) {
        rows[i].nextElementSibling?.classList.contains("event-detail") && rows[i].nextElementSibling.remove();
        rows[i].remove();
      }
      this.last = Number(this.rows()[this.rows().length - 1].dataset.index);
      this.hasAfter = true;
    }
  }

  visible(node) {
    const a = node.getBoundingClientRect();
    const b = this.scroll.getBoundingClientRect();
    return a.top < b.bottom + 400 && a.bottom > b.top - 400;
  }

  updateRange() {
    if (!this.range) return;
    const n = this.rows().length;
    const more = this.hasBefore || this.hasAfter ? t(" · scroll for more") : "";
    const range = { first: this.first, last: this.last, type: this.type };
    this.range.textContent = n
      ? (this.type
          ? fmt(t("showing events %(first)s–%(last)s (%(type)s only)"), range)
          : fmt(t("showing events %(first)s–%(last)s"), range)) + more
      : "";
  }

  /** Show an event: the window around it, scrolled to and highlighted. */
  async jump(index) {
    let row = document.getElementById(`ev-${index}`);
    if (!row || this.type) {
      await this.replace({ at: index });
      row = document.getElementById(`ev-${index}`);
    }
    if (!row) return;
    this.reveal(row, true);
  }

  reveal(row, highlight) {
    for (const old of this.body.querySelectorAll("tr.target")) old.classList.remove("target");
    this.scroll.closest("section").scrollIntoView({ block: "start" });
    this.scroll.scrollTop = row.offsetTop - this.scroll.clientHeight / 3;
    if (highlight) {
      row.classList.add("target");
      row.querySelector("button")?.focus({ preventScroll: true });
    }
  }

  async toggle(row) {
    const button = row.querySelector(".ev-open");
    const next = row.nextElementSibling;
    if (next && next.classList.contains("event-detail")) {
      next.remove();
      row.classList.remove("open");
      button?.setAttribute("aria-expanded", "false");
      return;
    }
    const html = await getText(`${this.urls.event}${row.dataset.index}/`);
    const detail = serverFragment(html).querySelector("tr");
    if (!detail || !row.isConnected) return;
    row.after(detail);
    row.classList.add("open");
    button?.setAttribute("aria-expanded", "true");
  }

  /** Live: new events were stored; follow them if the table shows the end. */
  noteNewEvents() {
    if (this.hasAfter || this.pendingTail) return;
    this.pendingTail = setTimeout(() => {
      this.pendingTail = 0;
      this.loadAfter();
    }, 300);
  }
}
