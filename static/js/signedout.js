/**
 * signedout.js — say "signed out" once, at the top of the page, with a way back.
 *
 * A WebSocket refused because the session ended (a restart with another secret key, a logout
 * in another tab, an expired session) looks like any other refused handshake to a browser.
 * streamclient.js asks the JSON API whether the session still holds; when it does not, the
 * page stops retrying and shows this notice, whose link logs in and comes back here.
 */

import { t } from "./i18n.js";

export const PROBE_URL = "/api/streams/?limit=1";

/** Whether the browser's session is gone (the API answers 401 or 403 to it). */
export async function signedOut(probeUrl = PROBE_URL) {
  try {
    const r = await fetch(probeUrl, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      cache: "no-store",
    });
    return r.status === 401 || r.status === 403;
  } catch {
    return false; // the server is away: not a sign-out (the socket keeps retrying)
  }
}

/** The notice, once per page: "Signed out — log in again" linking back to this page. */
export function showSignedOut(doc = document) {
  if (doc.getElementById("signed-out")) return;
  const here = window.location.pathname + window.location.search;
  const list = doc.createElement("ul");
  list.className = "messages";
  list.id = "signed-out";
  list.setAttribute("role", "alert");
  const item = doc.createElement("li");
  item.className = "error";
  item.append(t("You were signed out: live updates stopped. "));
  const link = doc.createElement("a");
  link.href = "/login/?next=" + encodeURIComponent(here);
  link.textContent = t("Log in again");
  item.append(link, t(" to come back to this page."));
  list.append(item);
  const main = doc.getElementById("main") || doc.body;
  main.prepend(list);
}
