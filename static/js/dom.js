/**
 * dom.js — the few DOM helpers every page module uses. An ES module, no build step.
 *
 * Model and upstream strings reach the page only as text (`el(…, text)` sets its text, with
 * any hidden character drawn as a marker: disguise.js), or as Markdown through markdown.js
 * (HTML disabled, then DOMPurify); `serverFragment` parses HTML, and only ever this server's
 * own template fragments, which Django escaped.
 */
import { setText } from "./disguise.js";

/** A new element with a class and, optionally, its text (hidden characters as markers). */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) setText(node, text);
  return node;
}

/** JSON text indented as the server shows it (json.dumps(…, indent=2)); anything else as is. */
export function pretty(value) {
  if (value === null || value === undefined) return "";
  if (typeof value !== "string") return JSON.stringify(value, null, 2);
  try {
    return JSON.stringify(JSON.parse(value), null, 2);
  } catch {
    return value;
  }
}

/** One of this server's template fragments (escaped by Django) as nodes. */
export function serverFragment(html) {
  const tpl = document.createElement("template");
  tpl.innerHTML = html;
  return tpl.content;
}

/** GET a same-origin URL's text; an HTTP error is an exception. */
export async function getText(url) {
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.text();
}
