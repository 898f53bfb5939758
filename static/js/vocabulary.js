/**
 * vocabulary.js — the server's names for what the scripts talk about: a stream's statuses
 * (which are active, which finished), the filters' and tags' limits, and the output event types.
 * Named once, in Python (dashboard/vocabulary.py, from streams/models.py and
 * streams/core/checks.py); base.html puts them in every page as
 * `{{ vocabulary|json_script:"streamscope-vocabulary" }}` and this module reads them, once.
 *
 *   import { isActive, OUTPUT_DELTAS } from "./vocabulary.js";
 *
 * A page without them is a server bug: importing this module then fails, loudly.
 */

const ELEMENT_ID = "streamscope-vocabulary";

function read() {
  const node = document.getElementById(ELEMENT_ID);
  const value = node ? JSON.parse(node.textContent) : null;
  if (!value || typeof value !== "object" || !value.statuses || !value.output) {
    throw new Error(`vocabulary.js: the page has no #${ELEMENT_ID} (base.html renders it)`);
  }
  return value;
}

export const VOCABULARY = read();

/** {all, labels, active, finished, initial}: Stream.Status and Stream.ACTIVE_STATUSES. */
export const STATUSES = VOCABULARY.statuses;
const ACTIVE = new Set(STATUSES.active);
/** Whether a stream in this status may still change (pending or streaming). */
export const isActive = (status) => ACTIVE.has(status);
/** Whether a stream in this status has ended (any status that is not active; not "none"). */
export const isFinished = (status) => Boolean(status) && !ACTIVE.has(status);
/** A status as the page says it: its label in the page's language, in lower case ("completed",
 * Dutch "voltooid"), as the templates' `status_label` filter writes it; the value itself stays
 * in classes and data attributes. An unknown status is shown as it came. */
export const statusWord = (status) =>
  Object.hasOwn(STATUSES.labels, status) ? STATUSES.labels[status].toLowerCase() : String(status ?? "");

/** {labels}: Stream.Source's values and their labels in the page's language. */
export const SOURCES = VOCABULARY.sources;
/** A stream's source as the page says it (its label in lower case), as the templates'
 * `source_label` filter writes it. An unknown source is shown as it came. */
export const sourceWord = (source) =>
  Object.hasOwn(SOURCES.labels, source) ? SOURCES.labels[source].toLowerCase() : String(source ?? "");

/** {filters: {name: max length}, tags: {max, chars}}. */
export const LIMITS = VOCABULARY.limits;

/** Event types whose deltas carry model output (checks.OUTPUT_DELTAS). */
export const OUTPUT_DELTAS = new Set(VOCABULARY.output.deltas);
/** Event types after which the response has ended (checks.TERMINAL_STATUS), to the status. */
export const TERMINAL_EVENTS = new Map(Object.entries(VOCABULARY.output.terminal));
/** How an output item type renders: message, tool, reasoning (checks.ITEM_KINDS). */
export const ITEM_KINDS = VOCABULARY.output.itemKinds;
/** A tool call's statuses shown as failed (streams.shapes.public.FAILED_TOOL_STATUSES). */
export const FAILED_TOOL_STATUSES = new Set(VOCABULARY.output.failedToolStatuses);

/** A stream's fields its tokens and cost are shown from (streams.shapes.public.USAGE_COLUMNS and
 * the resolved model, which priced them), as its frames carry them. */
export const USAGE_FIELDS = VOCABULARY.usage.fields;

/** How the ref of a simulator example price begins (streams.core.pricing.EXAMPLE): the
 * model follows ": ". */
export const EXAMPLE_PRICE = VOCABULARY.prices.example;
