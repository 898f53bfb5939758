/**
 * playground.js — the chat playground (templates/dashboard/playground.html).
 * An ES module, no build step; the WebSocket side is streamclient.js.
 *
 * - Sending is a POST (fetch, CSRF token from the form); the server starts the stream and
 *   answers the new turn, rendered by the page's own template. The WebSocket only receives.
 * - A streaming answer follows /ws/streams/<id>/?format=json and applies each event as it
 *   comes: the output (text, tool cards, reasoning, a rewrite) through output.js, the module
 *   the timeline renders live output with too; routing, rewrite, TTFT and deltas/s update the
 *   answer's header here, and its tokens and cost when the frame that finishes it comes (as
 *   the server renders them: stream_detail/format.js). Lost connections resume with
 *   after=<last index seen> (streamclient.js); a reload attaches again with after=-1, which
 *   replays the stored events of that one stream and continues live.
 * - When the stream ends the turn is fetched again, rendered by the server from the stored
 *   stream: what the page shows after an answer is exactly what a reload shows.
 * - Frames are queued and applied in animation frames, at most FRAME_BUDGET_MS of events per
 *   frame, then written once (output.js's flush) and scrolled once: a 10,000-event burst or a
 *   1 MB delta never holds the page for long, and the layout is read once per frame.
 * - Model output only ever reaches the DOM through textContent / Text nodes, or as Markdown
 *   through output.js / markdown.js (HTML disabled, then sanitised). The only other HTML
 *   inserted is the server's own rendering of a turn (Django-escaped).
 */

import { el, serverFragment } from "./dom.js";
import { offerScenarios } from "./formats.js";
import { fmt, num, t, tn } from "./i18n.js";
import { enhanceOutput, LiveOutput } from "./output.js";
import { connectStream } from "./streamclient.js";
// OUTPUT_DELTAS: deltas/s counts these from the first to the last, the way the recorder computes
// the stored figure (`tokens_per_s`, a rate of delta events, not of tokens).
import { isActive, OUTPUT_DELTAS, statusWord, TERMINAL_EVENTS, USAGE_FIELDS } from "./vocabulary.js";
// An answer's tokens and cost, rendered as the server renders them (the timeline's module), from
// the row's USAGE_FIELDS as its frames' `stream` fields carry them.
import { costNodes, costNote, tokensNodes, usageTitle } from "./stream_detail/format.js";

const BOTTOM_SLACK_PX = 140;
const SILENCE_AFTER_S = 5;
const RETRY_POLLS = 15;
// Work per animation frame on queued events (a frame is ~16 ms; the rest is for layout/paint).
const FRAME_BUDGET_MS = 6;

function nearBottom() {
  const doc = document.documentElement;
  return window.innerHeight + window.scrollY >= doc.scrollHeight - BOTTOM_SLACK_PX;
}

function scrollToBottom() {
  window.scrollTo({ top: document.documentElement.scrollHeight });
}

/** Why a POST that should have answered JSON did not. */
function failure(response) {
  if (response.redirected && new URL(response.url).pathname.startsWith("/login/")) {
    return t("You are logged out. Log in again (in another tab, to keep this message), then send.");
  }
  if (response.status === 403) return t("The server refused the request (403): reload the page.");
  return fmt(t("The server answered %(status)s. Please try again."), { status: response.status });
}

/** The server's rendering of one turn, as an element (Django-escaped HTML, not model data),
 * its message texts shown as Markdown. */
function fromHtml(html) {
  const turn = serverFragment(html.trim()).firstElementChild;
  enhanceOutput(turn);
  return turn;
}

/** A server turn, once in the page, wired for htmx (its thumbs post with it and swap only
 * themselves): htmx wires what it loaded or swapped, and a turn put in by this script is
 * neither, so its forms would post as plain forms and leave the conversation. */
function activate(turn) {
  window.htmx?.process(turn);
  return turn;
}

/** The next animation frame; a hidden tab gets none, so there a timer stands in. */
function nextFrame(callback) {
  if (document.hidden) setTimeout(callback, 16);
  else requestAnimationFrame(callback);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One answer being streamed into its turn element. */
class LiveAnswer {
  constructor(turn, hooks) {
    this.turn = turn;
    this.hooks = hooks;
    this.streamId = turn.dataset.stream;
    this.answer = turn.querySelector(".pg-answer");
    this.output = new LiveOutput(this.answer, {
      playground: true,
      onRewrite: (label) => this.rewrite(label),
    });
    this.deltas = 0;
    this.firstDeltaUs = null;
    this.lastFrameAt = performance.now();
    this.ended = false;
    this.queue = []; // frames received, not yet applied
    this.position = 0; // events of queue[0] already applied
    this.scheduled = false;
    this.endInfo = null; // the connection ended: finish once the queue is applied
    this.usage = {}; // the usage and cost columns the frames told
  }

  $(selector) {
    return this.turn.querySelector(selector);
  }

  start() {
    // The server renders nothing of an unfinished answer: the replay below fills it in.
    this.answer.replaceChildren();
    this.turn.dataset.active = "true";
    this.timer = setInterval(() => this.tick(), 1000);
    this.conn = connectStream(`/ws/streams/${this.streamId}/?format=json`, {
      after: -1,
      onFrame: (frame) => this.frame(frame),
      onOpen: () => this.silence(""),
      onClose: (info) => {
        if (info.willRetry) this.silence(t("connection lost, reconnecting…"));
      },
      onEnd: (info) => this.end(info),
    });
    return this;
  }

  stop() {
    if (this.conn) this.conn.close();
  }

  // -- frames and events

  frame(frame) {
    this.lastFrameAt = performance.now();
    this.queue.push(frame);
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    nextFrame(() => this.drain());
  }

  /** Apply queued events for at most FRAME_BUDGET_MS, write them once, scroll once. */
  drain() {
    this.scheduled = false;
    const stick = nearBottom();
    const deadline = performance.now() + FRAME_BUDGET_MS;
    while (this.queue.length) {
      const frame = this.queue[0];
      const events = frame.events || [];
      while (this.position < events.length && performance.now() < deadline) {
        this.event(events[this.position]);
        this.position += 1;
      }
      if (this.position < events.length) break;
      this.queue.shift();
      this.position = 0;
      if (frame.stream) this.fields(frame.stream);
      if (frame.status) this.status(frame.status);
    }
    this.output.flush();
    this.tick();
    if (stick) scrollToBottom();
    if (this.queue.length) this.schedule();
    else if (this.endInfo) this.end(this.endInfo);
  }

  event(e) {
    let d;
    try {
      d = JSON.parse(e.data);
    } catch {
      return; // not JSON: the timeline shows it, the answer has nothing to add
    }
    if (!d || typeof d !== "object") return;
    if (OUTPUT_DELTAS.has(d.type)) this.counted(e.t_us);
    this.output.apply(d);
    // What the answer's header and notice show; the schema is additive: others are ignored.
    if (d.type === "response.created") {
      if (d.response && typeof d.response.model === "string") this.route(d.response.model);
    } else if (d.type === "response.routing.completed") {
      this.route(d.model_id, d.category, d.reasoning, d.source);
    } else if (d.type === "error") {
      this.notice("err", [d.code, d.message].filter((x) => typeof x === "string" && x).join(": "));
    } else if (TERMINAL_EVENTS.has(d.type)) {
      const error = d.response && d.response.error;
      if (error && error.message) this.notice("err", error.message);
    }
  }

  fields(s) {
    if (typeof s.ttft_ms === "number") {
      const ttft = this.$(".pg-ttft");
      ttft.hidden = false;
      ttft.querySelector("b").textContent = num(Math.round(s.ttft_ms));
    }
    if (typeof s.tokens_per_s === "number") this.rate(s.tokens_per_s);
    if (s.resolved_model) this.route(s.resolved_model, s.routing_category, s.routing_reasoning);
    if (s.error_message && !this.$(".pg-notice-text").textContent) {
      this.notice("err", [s.error_code, s.error_message].filter(Boolean).join(": "));
    }
    for (const name of USAGE_FIELDS) if (Object.hasOwn(s, name)) this.usage[name] = s[name];
    this.showUsage();
  }

  /** Tokens and cost, once the answer ended (before, there is nothing to show). */
  showUsage() {
    const status = this.turn.dataset.status;
    if (!status || isActive(status)) return;
    const f = { requested_model: this.$(".pg-route-model")?.textContent, ...this.usage };
    const tokens = this.$(".pg-tokens");
    if (tokens) {
      tokens.hidden = !f.usage_source;
      tokens.title = usageTitle(f, true);
      tokens.querySelector("b").replaceChildren(...tokensNodes(f));
    }
    const cost = this.$(".pg-cost");
    if (cost) {
      cost.hidden = false;
      cost.title = costNote(f, true);
      cost.querySelector("b").replaceChildren(...costNodes(f, true));
    }
  }

  status(status) {
    this.turn.dataset.status = status;
    const badge = this.$(".pg-status");
    badge.className = `badge pg-status ${status}`;
    badge.textContent = statusWord(status);
    this.showUsage();
  }

  route(model, category, reasoning, source) {
    const badge = this.$(".pg-route");
    if (!model && !category) return;
    badge.hidden = false;
    if (model) badge.querySelector(".pg-route-model").textContent = model;
    if (category) {
      let cat = badge.querySelector(".pg-route-cat");
      if (!cat) {
        badge.append(" · ");
        cat = badge.appendChild(el("span", "pg-route-cat"));
      }
      cat.textContent = category;
    }
    if (reasoning) badge.title = source ? `${reasoning} (${source})` : reasoning;
  }

  rate(value) {
    const rate = this.$(".pg-rate");
    rate.hidden = false;
    rate.querySelector("b").textContent = num(value, 1);
  }

  rewrite(label) {
    const badge = this.$(".pg-rewrite");
    badge.hidden = false;
    badge.textContent = label;
  }

  notice(kind, text) {
    const notice = this.$(".pg-notice");
    notice.hidden = false;
    notice.className = `pg-notice ${kind}`;
    this.$(".pg-notice-text").textContent = text;
  }

  silence(text) {
    const s = this.$(".pg-silence");
    s.hidden = !text;
    s.textContent = text;
  }

  tick() {
    if (this.ended) return;
    const quiet = (performance.now() - this.lastFrameAt) / 1000;
    const s = this.$(".pg-silence");
    if (this.conn && this.conn.socket && quiet >= SILENCE_AFTER_S) {
      this.silence(fmt(t("no event for %(seconds)s s"), { seconds: num(Math.floor(quiet)) }));
      s.dataset.quiet = "1";
    } else if (s.dataset.quiet) {
      delete s.dataset.quiet;
      this.silence("");
    }
  }

  counted(tUs) {
    this.deltas += 1;
    if (typeof tUs !== "number") return;
    if (this.firstDeltaUs === null) this.firstDeltaUs = tUs;
    const span = (tUs - this.firstDeltaUs) / 1e6;
    if (this.deltas > 1 && span > 0) this.rate((this.deltas - 1) / span);
  }

  // -- the end

  async end(info) {
    if (this.queue.length) {
      this.endInfo = info; // drain() comes back here when everything received is shown
      return;
    }
    if (this.ended) return;
    this.ended = true;
    this.output.finish();
    clearInterval(this.timer);
    this.silence("");
    if (info.reason === "refused") {
      this.notice("err", t("Lost the live connection to this answer. Reload the page to see it."));
      this.hooks.ended(this);
      return;
    }
    if (info.reason !== "terminal") {
      this.hooks.ended(this);
      return;
    }
    await this.hooks.refresh(this.turn);
    if (this.turn.isConnected && this.turn.dataset.active) {
      // the server's rendering could not be fetched: keep what streamed, as ended
      delete this.turn.dataset.active;
      this.turn.querySelector(".pg-assistant").removeAttribute("aria-busy");
    }
    this.hooks.ended(this);
  }
}

function init(root) {
  const form = document.getElementById("pg-composer");
  const input = document.getElementById("pg-input");
  const sendButton = document.getElementById("pg-send");
  const stopButton = document.getElementById("pg-stop");
  const errors = document.getElementById("pg-errors");
  const transcript = document.getElementById("pg-transcript");
  const csrf = form.querySelector("input[name=csrfmiddlewaretoken]").value;
  const announce = el("div", "visually-hidden");
  announce.setAttribute("aria-live", "polite");
  root.append(announce);
  let live = null;
  let sending = false;

  function setActive(answer) {
    live = answer;
    form.dataset.active = answer ? "true" : "false";
    sendButton.hidden = Boolean(answer);
    stopButton.hidden = !answer;
    stopButton.disabled = false;
    stopButton.textContent = t("Stop");
  }

  const hooks = {
    ended(answer) {
      if (live === answer) setActive(null);
    },
    async refresh(turn) {
      // The stored stream is the truth: swap in the server's rendering of the ended turn.
      for (let poll = 0; poll <= RETRY_POLLS; poll += 1) {
        let fresh;
        try {
          const r = await fetch(turn.dataset.url, { headers: { Accept: "text/html" } });
          if (!r.ok) return;
          fresh = fromHtml(await r.text());
        } catch {
          return; // keep what streamed
        }
        if (turn.dataset.retries) fresh.dataset.retries = turn.dataset.retries;
        turn.replaceWith(fresh);
        turn = activate(fresh);
        if (fresh.dataset.active === "true") {
          // a stall, retried by the server as a new stream: follow that one
          follow(fresh);
          return;
        }
        if (fresh.dataset.awaitingRetry !== "true") {
          const status = fresh.dataset.status || "";
          retried(fresh, status);
          announce.textContent =
            status === "completed" ? t("Answer complete.") : fmt(t("Answer %(status)s."), { status: statusWord(status) });
          return;
        }
        await sleep(1000);
      }
    },
  };

  /** A Retry that ended badly again must not look like nothing happened: say which retry. */
  function retried(turn, status) {
    const n = Number(turn.dataset.retries || 0);
    const notice = turn.querySelector(".pg-notice");
    if (!n || status === "completed" || !notice) return;
    const text = notice.querySelector(".pg-notice-text");
    const again = fmt(tn("Retried once, %(status)s again.", "Retried %(n)s times, %(status)s again.", n), {
      n,
      status: statusWord(status),
    });
    text.textContent = `${again} ${text.textContent}`;
    notice.classList.add("flash");
  }

  function follow(turn) {
    if (turn.dataset.active === "true") {
      const answer = new LiveAnswer(turn, hooks).start();
      setActive(answer);
    } else if (turn.dataset.awaitingRetry === "true") {
      hooks.refresh(turn);
    }
  }

  // -- errors of the composer

  function clearErrors() {
    errors.replaceChildren();
    for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  }

  function labelOf(control) {
    const label = control && control.closest("label");
    const first = label && label.firstChild;
    return first && first.nodeType === Node.TEXT_NODE ? first.textContent.trim() : "";
  }

  function showErrors(data, status) {
    clearErrors();
    const fieldErrors = (data && data.errors) || {};
    const lines = [];
    let focus = null;
    for (const [name, messages] of Object.entries(fieldErrors)) {
      const control = name === "__all__" ? null : form.elements[name];
      if (control) {
        control.setAttribute("aria-invalid", "true");
        focus = focus || control;
        const options = control.closest("details");
        if (options) options.open = true;
      }
      const label = name === "input" ? t("Message") : labelOf(control);
      for (const message of messages) lines.push(label ? `${label}: ${message}` : message);
    }
    if (!lines.length) {
      lines.push((data && data.message) || fmt(t("The server answered %(status)s. Please try again."), { status }));
    }
    for (const line of lines) errors.append(el("p", "", line));
    if (focus) focus.focus();
  }

  // -- sending

  function sidebarEntry(conversation) {
    const list = document.getElementById("pg-conversations");
    for (const none of list.querySelectorAll(".pg-none")) none.remove();
    for (const a of list.querySelectorAll("a[aria-current]")) a.removeAttribute("aria-current");
    let link = list.querySelector(`a[href="${conversation.url}"]`);
    if (!link) {
      link = el("a");
      link.href = conversation.url;
      link.append(el("span", "pg-ctitle", conversation.title), " ");
      link.append(el("time", "muted"));
      const item = el("li");
      item.append(link);
      list.prepend(item);
      document.getElementById("pg-count").textContent = list.children.length;
    }
    link.setAttribute("aria-current", "page");
    link.querySelector("time").textContent = t("just now");
    list.prepend(link.closest("li"));
  }

  async function send() {
    if (sending) return;
    if (live) {
      clearErrors();
      errors.append(el("p", "", t("The answer is still streaming: press Esc to stop it, or wait.")));
      return;
    }
    sending = true;
    sendButton.disabled = true;
    try {
      const r = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { Accept: "application/json", "X-CSRFToken": csrf },
      });
      let data = null;
      try {
        data = await r.json();
      } catch {
        data = null;
      }
      if (!r.ok || !data || !data.html) {
        showErrors(data || { message: failure(r) }, r.status);
        return;
      }
      clearErrors();
      input.value = "";
      resize();
      const conversation = data.conversation;
      if (form.getAttribute("action") !== conversation.send_url) {
        form.setAttribute("action", conversation.send_url);
        history.replaceState(null, "", conversation.url);
        document.getElementById("pg-title").textContent = conversation.title;
        document.title = `${conversation.title} · Streamscope`;
      }
      sidebarEntry(conversation);
      for (const old of transcript.querySelectorAll(".pg-retry")) old.remove();
      const empty = transcript.querySelector(".pg-empty");
      if (empty) empty.hidden = true;
      const turn = fromHtml(data.html);
      transcript.append(turn);
      follow(activate(turn));
      scrollToBottom();
    } catch {
      showErrors({ message: t("Could not reach the server. Check the connection and try again.") });
    } finally {
      sending = false;
      sendButton.disabled = false;
    }
  }

  async function stop() {
    if (!live || stopButton.disabled) return;
    stopButton.disabled = true;
    stopButton.textContent = t("Stopping…");
    try {
      await fetch(`/api/streams/${live.streamId}/cancel/`, {
        method: "POST",
        headers: { "X-CSRFToken": csrf, Accept: "application/json" },
      });
      // 202: the terminal frame (cancelled) follows; 409: it had already ended.
    } catch {
      stopButton.disabled = false;
      stopButton.textContent = t("Stop");
    }
  }

  async function retry(retryForm) {
    const turn = retryForm.closest(".pg-turn");
    const button = retryForm.querySelector("button");
    button.disabled = true;
    try {
      const r = await fetch(retryForm.action, {
        method: "POST",
        body: new FormData(retryForm),
        headers: { Accept: "application/json", "X-CSRFToken": csrf },
      });
      const data = await r.json().catch(() => null);
      if (!r.ok || !data || !data.html) {
        const text = turn.querySelector(".pg-notice-text");
        text.textContent = (data && data.message) || failure(r);
        button.disabled = false;
        return;
      }
      const fresh = fromHtml(data.html);
      fresh.dataset.retries = String(Number(turn.dataset.retries || 0) + 1);
      turn.replaceWith(fresh);
      follow(activate(fresh));
      input.focus();
    } catch {
      button.disabled = false;
    }
  }

  // -- wiring

  function resize() {
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight + 2, window.innerHeight * 0.4)}px`;
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  input.addEventListener("input", resize);
  stopButton.addEventListener("click", stop);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && live) {
      event.preventDefault();
      stop();
    }
  });
  transcript.addEventListener("submit", (event) => {
    const retryForm = event.target.closest(".pg-retry");
    if (!retryForm) return;
    event.preventDefault();
    retry(retryForm);
  });

  // What the chosen scenario does, from the simulator's catalogue (each option's title).
  const scenario = document.getElementById("pg-scenario");
  const scenarioHelp = document.getElementById("pg-scenario-help");
  const describeScenario = () => {
    if (scenario && scenarioHelp) scenarioHelp.textContent = scenario.selectedOptions[0]?.title || "";
  };
  scenario?.addEventListener("change", describeScenario);
  offerScenarios(document.getElementById("pg-format"));
  describeScenario();

  // On a phone the conversation list starts folded: the chat is what the screen is for.
  if (window.matchMedia("(max-width: 760px)").matches) document.getElementById("pg-list").open = false;
  enhanceOutput(transcript);
  for (const turn of transcript.querySelectorAll(".pg-turn")) follow(turn);
  if (transcript.querySelector(".pg-turn")) scrollToBottom();
  resize();
  input.focus();
}

const root = document.getElementById("playground");
// (no composer: the user's role in the project lets them read the conversation, not send)
if (root && document.getElementById("pg-composer")) init(root);
