/**
 * playground.js — the chat playground (templates/dashboard/playground.html).
 * An ES module, no build step; the WebSocket side is streamclient.js.
 *
 * - Sending is a POST (fetch, CSRF token from the form); the server starts the stream and
 *   answers the new turn, rendered by the page's own template. The WebSocket only receives.
 * - A streaming answer follows /ws/streams/<id>/?format=json and applies each event to the
 *   DOM as it comes: text deltas append to a text node, tool calls become cards, routing,
 *   rewrite, TTFT and tokens/s update the answer's header. Lost connections resume with
 *   after=<last index seen> (streamclient.js); a reload attaches again with after=-1, which
 *   replays the stored events of that one stream and continues live.
 * - When the stream ends the turn is fetched again, rendered by the server from the stored
 *   stream: what the page shows after an answer is exactly what a reload shows.
 * - Model output only ever reaches the DOM through textContent / Text nodes. The only HTML
 *   inserted is the server's own rendering of a turn (Django-escaped).
 */

import { connectStream } from "./streamclient.js";

// Deltas that carry model output, as streams/checks.py's OUTPUT_DELTAS: tokens/s counts these
// from the first to the last, the way the recorder computes the stored figure.
const OUTPUT_DELTAS = new Set([
  "response.output_text.delta",
  "response.refusal.delta",
  "response.function_call_arguments.delta",
  "response.reasoning_summary_text.delta",
  "response.reasoning_text.delta",
  "response.custom_tool_call_input.delta",
  "response.mcp_call_arguments.delta",
  "response.code_interpreter_call_code.delta",
  "response.audio.transcript.delta",
]);
const BOTTOM_SLACK_PX = 140;
const SILENCE_AFTER_S = 5;
const RETRY_POLLS = 15;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function pretty(value) {
  if (value === null || value === undefined) return "";
  let parsed = value;
  if (typeof value === "string") {
    try {
      parsed = JSON.parse(value);
    } catch {
      return value;
    }
    if (parsed === null || typeof parsed !== "object") return value;
  }
  return JSON.stringify(parsed, null, 2);
}

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
    return "You are logged out. Log in again (in another tab, to keep this message), then send.";
  }
  if (response.status === 403) return "The server refused the request (403): reload the page.";
  return `The server answered ${response.status}. Please try again.`;
}

/** The server's rendering of one turn, as an element (Django-escaped HTML, not model data). */
function fromHtml(html) {
  const template = document.createElement("template");
  template.innerHTML = html.trim();
  return template.content.firstElementChild;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One answer being streamed into its turn element. */
class LiveAnswer {
  constructor(turn, hooks) {
    this.turn = turn;
    this.hooks = hooks;
    this.streamId = turn.dataset.stream;
    this.answer = turn.querySelector(".pg-answer");
    this.items = new Map(); // output_index -> {type, block?, parts: Map(ci -> part), tool?}
    this.deltas = 0;
    this.firstDeltaUs = null;
    this.lastFrameAt = performance.now();
    this.ended = false;
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
        if (info.willRetry) this.silence("connection lost, reconnecting…");
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
    const stick = nearBottom();
    for (const event of frame.events || []) this.event(event);
    if (frame.stream) this.fields(frame.stream);
    if (frame.status) this.status(frame.status);
    this.tick();
    if (stick) scrollToBottom();
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
    const oi = Number.isInteger(d.output_index) ? d.output_index : 0;
    const ci = Number.isInteger(d.content_index) ? d.content_index : 0;
    switch (d.type) {
      case "response.created":
        if (d.response && typeof d.response.model === "string") this.route(d.response.model);
        break;
      case "response.routing.completed":
        this.route(d.model_id, d.category, d.reasoning, d.source);
        break;
      case "response.output_item.added":
        this.item(oi, d.item);
        break;
      case "response.content_part.added":
        this.part(oi, ci, d.part && d.part.type);
        break;
      case "response.output_text.delta":
      case "response.refusal.delta":
        this.delta(oi, ci, d.delta, d.type === "response.refusal.delta");
        break;
      case "response.output_text.done":
      case "response.refusal.done":
        this.textDone(oi, ci, d.type === "response.refusal.done" ? d.refusal : d.text);
        break;
      case "response.function_call_arguments.delta":
        this.argsDelta(oi, d.delta);
        break;
      case "response.function_call_arguments.done":
        this.argsDone(oi, d.arguments);
        break;
      case "response.output_item.done":
        this.itemDone(oi, d.item);
        break;
      case "response.rewrite.in_progress":
        this.rewrite("rewriting…");
        break;
      case "response.completed":
      case "response.incomplete":
      case "response.failed":
        this.completed(d);
        break;
      case "error":
        this.notice("err", [d.code, d.message].filter((x) => typeof x === "string" && x).join(": "));
        break;
      default:
      // The schema is additive: unknown events are ignored, never fatal.
    }
  }

  fields(s) {
    if (typeof s.ttft_ms === "number") {
      const ttft = this.$(".pg-ttft");
      ttft.hidden = false;
      ttft.querySelector("b").textContent = Math.round(s.ttft_ms);
    }
    if (typeof s.tokens_per_s === "number") this.rate(s.tokens_per_s);
    if (s.resolved_model) this.route(s.resolved_model, s.routing_category, s.routing_reasoning);
    if (s.error_message && !this.$(".pg-notice-text").textContent) {
      this.notice("err", [s.error_code, s.error_message].filter(Boolean).join(": "));
    }
  }

  status(status) {
    this.turn.dataset.status = status;
    const badge = this.$(".pg-status");
    badge.className = `badge pg-status ${status}`;
    badge.textContent = status;
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
    rate.querySelector("b").textContent = value.toFixed(1);
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
      this.silence(`no event for ${Math.floor(quiet)} s`);
    } else if (s.textContent.startsWith("no event")) {
      this.silence("");
    }
  }

  // -- the answer's blocks, ordered by (output_index, content_index) like the server's

  place(block, oi, ci) {
    block.dataset.oi = oi;
    if (ci !== undefined) block.dataset.ci = ci;
    const key = (node) => [Number(node.dataset.oi), Number(node.dataset.ci || 0)];
    const mine = [oi, ci || 0];
    for (const other of this.answer.querySelectorAll(":scope > .pg-block")) {
      const [o, c] = key(other);
      if (o > mine[0] || (o === mine[0] && c > mine[1])) {
        // a draft <details> belongs to the block before it
        this.answer.insertBefore(block, other);
        return block;
      }
    }
    this.answer.append(block);
    return block;
  }

  item(oi, raw) {
    let item = this.items.get(oi);
    const type = (raw && typeof raw.type === "string" && raw.type) || "message";
    if (!item) {
      item = { type, parts: new Map() };
      this.items.set(oi, item);
    }
    if (type === "function_call" || type === "custom_tool_call" || type === "mcp_call") {
      item.type = type;
      if (!item.tool) item.tool = this.toolCard(oi, raw || {});
    } else if (type === "reasoning" && !item.block) {
      item.type = type;
      const block = el("details", "pg-block pg-reasoning");
      block.append(el("summary", "", "Reasoning"));
      item.text = block.appendChild(el("div", "pg-text"));
      item.block = this.place(block, oi);
    } else if (type !== "message" && !item.block) {
      item.type = type;
      item.block = this.place(el("div", "pg-block pg-other muted", `(${type} item)`), oi);
    }
    return item;
  }

  toolCard(oi, raw) {
    const card = el("section", "pg-block pg-tool");
    const head = card.appendChild(el("header"));
    const icon = head.appendChild(el("span", "pg-tool-icon", "ƒ"));
    icon.setAttribute("aria-hidden", "true");
    const name = head.appendChild(el("code", "pg-tool-name", raw.name || raw.type || "tool"));
    head.append(" ");
    const status = head.appendChild(el("span", "badge pg-tool-status streaming", "running"));
    if (raw.call_id) head.append(" ", el("code", "pg-tool-id muted", raw.call_id));
    card.append(el("div", "pg-tool-label", "Arguments"));
    const args = card.appendChild(el("pre", "pg-tool-args"));
    const outLabel = card.appendChild(el("div", "pg-tool-label", "Output"));
    const output = card.appendChild(el("pre", "pg-tool-output"));
    outLabel.hidden = output.hidden = true;
    this.place(card, oi);
    const tool = { card, name, status, args, outLabel, output, text: "" };
    if (typeof raw.arguments === "string" && raw.arguments) this.setArgs(tool, raw.arguments);
    return tool;
  }

  part(oi, ci, type) {
    const item = this.item(oi, { type: "message" });
    let part = item.parts.get(ci);
    if (!part) {
      const refusal = type === "refusal";
      const block = el("div", `pg-block pg-text${refusal ? " pg-refusal" : ""}`);
      const node = block.appendChild(document.createTextNode(""));
      part = { block: this.place(block, oi, ci), node, text: "", done: false };
      item.parts.set(ci, part);
    }
    return part;
  }

  counted(tUs) {
    this.deltas += 1;
    if (typeof tUs !== "number") return;
    if (this.firstDeltaUs === null) this.firstDeltaUs = tUs;
    const span = (tUs - this.firstDeltaUs) / 1e6;
    if (this.deltas > 1 && span > 0) this.rate((this.deltas - 1) / span);
  }

  delta(oi, ci, text, refusal) {
    if (typeof text !== "string") return;
    const part = this.part(oi, ci, refusal ? "refusal" : "output_text");
    part.node.appendData(text);
    part.text += text;
  }

  textDone(oi, ci, text) {
    if (typeof text !== "string") return;
    const part = this.part(oi, ci);
    part.done = true;
    if (text === part.text) return;
    if (part.text) {
      // The final text differs from what streamed (a rewrite pass): show the final text,
      // keep the draft one click away.
      const draft = el("details", "pg-draft");
      draft.append(el("summary", "", "Streamed draft (before the rewrite)"));
      draft.append(el("div", "pg-text", part.text));
      part.block.after(draft);
      this.rewrite("rewritten");
    }
    part.node.data = text;
    part.text = text;
  }

  setArgs(tool, text) {
    tool.text = text;
    tool.args.textContent = pretty(text);
  }

  argsDelta(oi, text) {
    if (typeof text !== "string") return;
    const tool = this.item(oi, { type: "function_call" }).tool;
    tool.text += text;
    tool.args.textContent = tool.text;
  }

  argsDone(oi, text) {
    if (typeof text !== "string") return;
    this.setArgs(this.item(oi, { type: "function_call" }).tool, text);
  }

  itemDone(oi, raw) {
    if (!raw || typeof raw !== "object") return;
    const item = this.item(oi, raw);
    if (item.tool) {
      const tool = item.tool;
      if (raw.name) tool.name.textContent = raw.name;
      if (typeof raw.arguments === "string" && raw.arguments) this.setArgs(tool, raw.arguments);
      const status = typeof raw.status === "string" ? raw.status : "";
      tool.status.className = `badge pg-tool-status ${status}`;
      tool.status.textContent = status || "done";
      tool.card.dataset.status = status;
      if (raw.output !== undefined && raw.output !== null && raw.output !== "") {
        tool.output.textContent = pretty(raw.output);
        tool.outLabel.hidden = tool.output.hidden = false;
      }
    } else if (item.type === "message" && Array.isArray(raw.content)) {
      raw.content.forEach((c, ci) => {
        if (c && typeof c.text === "string" && !item.parts.has(ci)) this.textDone(oi, ci, c.text);
      });
    } else if (item.type === "reasoning" && Array.isArray(raw.summary)) {
      item.text.textContent = raw.summary.map((s) => (s && s.text) || "").join("\n\n");
    }
  }

  completed(d) {
    const response = d.response && typeof d.response === "object" ? d.response : {};
    const text = typeof response.output_text === "string" ? response.output_text : d.final_text;
    const hasText = this.answer.querySelector(".pg-text");
    if (typeof text === "string" && text && !hasText) this.textDone(0, 0, text);
    if (response.error && response.error.message) this.notice("err", response.error.message);
  }

  // -- the end

  async end(info) {
    this.ended = true;
    clearInterval(this.timer);
    this.silence("");
    if (info.reason === "refused") {
      this.notice("err", "Lost the live connection to this answer. Reload the page to see it.");
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
    stopButton.textContent = "Stop";
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
        turn.replaceWith(fresh);
        turn = fresh;
        if (fresh.dataset.active === "true") {
          // a stall, retried by the server as a new stream: follow that one
          follow(fresh);
          return;
        }
        if (fresh.dataset.awaitingRetry !== "true") {
          const status = fresh.dataset.status || "";
          announce.textContent = status === "completed" ? "Answer complete." : `Answer ${status}.`;
          return;
        }
        await sleep(1000);
      }
    },
  };

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
      const label = name === "input" ? "Message" : labelOf(control);
      for (const message of messages) lines.push(label ? `${label}: ${message}` : message);
    }
    if (!lines.length) {
      lines.push((data && data.message) || `The server answered ${status}. Please try again.`);
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
    link.querySelector("time").textContent = "just now";
    list.prepend(link.closest("li"));
  }

  async function send() {
    if (sending) return;
    if (live) {
      clearErrors();
      errors.append(el("p", "", "The answer is still streaming: press Esc to stop it, or wait."));
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
      follow(turn);
      scrollToBottom();
    } catch {
      showErrors({ message: "Could not reach the server. Check the connection and try again." });
    } finally {
      sending = false;
      sendButton.disabled = false;
    }
  }

  async function stop() {
    if (!live || stopButton.disabled) return;
    stopButton.disabled = true;
    stopButton.textContent = "Stopping…";
    try {
      await fetch(`/api/streams/${live.streamId}/cancel/`, {
        method: "POST",
        headers: { "X-CSRFToken": csrf, Accept: "application/json" },
      });
      // 202: the terminal frame (cancelled) follows; 409: it had already ended.
    } catch {
      stopButton.disabled = false;
      stopButton.textContent = "Stop";
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
      turn.replaceWith(fresh);
      follow(fresh);
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

  // On a phone the conversation list starts folded: the chat is what the screen is for.
  if (window.matchMedia("(max-width: 760px)").matches) document.getElementById("pg-list").open = false;
  for (const turn of transcript.querySelectorAll(".pg-turn")) follow(turn);
  if (transcript.querySelector(".pg-turn")) scrollToBottom();
  resize();
  input.focus();
}

const root = document.getElementById("playground");
if (root) init(root);
