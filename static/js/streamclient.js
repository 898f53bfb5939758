/**
 * streamclient.js — follow a Streamscope WebSocket, resuming where it left off.
 * An ES module, no build step, no dependencies.
 *
 *   import { connectStream } from "/static/js/streamclient.js";
 *
 *   const conn = connectStream("/ws/streams/42/?format=json", {
 *     after: -1,                         // the last event index the page already shows
 *     onFrame(frame, conn) {},           // every frame, parsed (JSON frames, see below)
 *     onStatus(status, frame, conn) {},  // a frame carried a (new) status
 *     onOpen(conn) {}, onClose(info, conn) {},   // info: {code, reason, willRetry, delayMs}
 *     onEnd(info, conn) {},  // for good: {reason: "terminal" | "closed" | "refused" | "signed_out"
 *                            //   | "revoked"}
 *     probeUrl: undefined,   // where to ask whether the session still holds; null: never ask
 *   });
 *   conn.lastIndex;  // the highest event index received so far
 *   conn.close();    // stop; no reconnect
 *
 * Frames and close codes are documented in streams/live/consumers.py. This client:
 * - tracks the highest event index it has received (`events[].index`) and reconnects with
 *   `after=<lastIndex>`, so the server sends exactly the missing events;
 * - reconnects with jittered exponential backoff (baseDelayMs × 2^attempt, capped at
 *   maxDelayMs, "full jitter"), at once after close code 4008 (the server let a slow client
 *   go: resuming is the expected next step);
 * - stops after a terminal frame (`terminal: true`; the server then closes with 1000), after
 *   `conn.close()`, and after `maxRefusals` connections in a row that never opened: a refused
 *   handshake (not logged in, no access, foreign origin) looks the same as
 *   a network failure to a browser, so it cannot be told apart from one on the first try;
 * - stops with `revoked` when the server closes with 4003 (the token or share link the socket
 *   was opened with was revoked, or the link expired: retrying cannot help);
 * - after a refused handshake asks the API whether the session still holds (signedout.js):
 *   when it does not (a restart with a new secret, a logout elsewhere), it stops at once with
 *   `signed_out` and the page says "signed out, log in again" with a link back, instead of
 *   "reconnecting…" for ever.
 * For the live list (/ws/streams/) frames carry no event indexes and `after` is left as given.
 */

import { showSignedOut, signedOut } from "./signedout.js";

const DEFAULTS = {
  after: null,
  baseDelayMs: 500,
  maxDelayMs: 15000,
  maxRefusals: 6,
  onFrame: () => {},
  onStatus: () => {},
  onOpen: () => {},
  onClose: () => {},
  onEnd: () => {},
};

const CLOSE_NORMAL = 1000;
const CLOSE_TOO_SLOW = 4008;
const CLOSE_REVOKED = 4003;

/** An absolute ws:// or wss:// URL for `url` (a path, or http(s)/ws(s) URL). */
export function websocketUrl(url, after) {
  const u = new URL(url, window.location.href);
  if (u.protocol === "http:") u.protocol = "ws:";
  if (u.protocol === "https:") u.protocol = "wss:";
  if (after !== null && after !== undefined) u.searchParams.set("after", String(after));
  return u.toString();
}

/** Full jitter: a random delay in [0, min(max, base × 2^attempt)]. */
export function backoffDelay(attempt, baseDelayMs, maxDelayMs) {
  return Math.random() * Math.min(maxDelayMs, baseDelayMs * 2 ** attempt);
}

export function connectStream(url, options = {}) {
  const opts = { ...DEFAULTS, ...options };
  const conn = {
    lastIndex: opts.after === null || opts.after === undefined ? null : Number(opts.after),
    status: null,
    socket: null,
    terminal: false,
    ended: false,
    close() {
      stop("closed");
    },
  };
  let attempt = 0; // reconnects since the last frame
  let refusals = 0; // connections in a row that never opened
  let probing = false; // asking whether the session still holds
  let timer = null;

  function stop(reason) {
    if (conn.ended) return;
    conn.ended = true;
    clearTimeout(timer);
    const socket = conn.socket;
    if (socket && socket.readyState <= WebSocket.OPEN) socket.close(CLOSE_NORMAL);
    opts.onEnd({ reason }, conn);
  }

  function handle(data) {
    const frame = JSON.parse(data);
    for (const e of frame.events || []) {
      if (conn.lastIndex === null || e.index > conn.lastIndex) conn.lastIndex = e.index;
    }
    const status = frame.status ?? null;
    const terminal = frame.terminal === true;
    attempt = 0;
    opts.onFrame(frame, conn);
    if (status !== null && status !== conn.status) {
      conn.status = status;
      opts.onStatus(status, frame, conn);
    }
    if (terminal) conn.terminal = true;
  }

  function open() {
    if (conn.ended) return;
    let opened = false;
    const socket = new WebSocket(websocketUrl(url, conn.lastIndex));
    conn.socket = socket;
    socket.onopen = () => {
      opened = true;
      refusals = 0;
      opts.onOpen(conn);
    };
    socket.onmessage = (event) => handle(event.data);
    socket.onclose = (event) => {
      if (conn.socket !== socket) return;
      conn.socket = null;
      if (conn.ended) return;
      // Only a terminal frame ends a stream: a close code alone does not (a server answering
      // a close the client started echoes 1000, and the live list never ends).
      if (conn.terminal) {
        opts.onClose({ code: event.code, reason: event.reason, willRetry: false }, conn);
        stop("terminal");
        return;
      }
      if (event.code === CLOSE_REVOKED) {
        opts.onClose({ code: event.code, reason: event.reason, willRetry: false }, conn);
        stop("revoked");
        return;
      }
      if (!opened) refusals += 1;
      if (!opened && !probing && opts.probeUrl !== null) {
        // refused (or the server is away, restarting): perhaps the session ended, and then
        // retrying cannot help
        probing = true;
        signedOut(opts.probeUrl).then((gone) => {
          probing = false;
          if (gone && !conn.ended) {
            showSignedOut();
            stop("signed_out");
          }
        });
      }
      if (refusals >= opts.maxRefusals) {
        opts.onClose({ code: event.code, reason: event.reason, willRetry: false }, conn);
        stop("refused");
        return;
      }
      const delayMs =
        event.code === CLOSE_TOO_SLOW
          ? 100
          : backoffDelay(attempt, opts.baseDelayMs, opts.maxDelayMs);
      attempt += 1;
      opts.onClose({ code: event.code, reason: event.reason, willRetry: true, delayMs }, conn);
      timer = setTimeout(open, delayMs);
    };
  }

  open();
  return conn;
}
