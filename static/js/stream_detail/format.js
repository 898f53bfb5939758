/**
 * Figures formatted as dashboard/templatetags/inspection.py formats them, for what only the
 * client knows (live counts, the chart's axes and captions, replay progress), in the page's
 * language (i18n.js: a decimal comma in Dutch; thousands in thin spaces in every language).
 *
 * Also a stream's usage and cost as the server renders them (inspection.py's `tokens`,
 * `token_count`, `token_note`, `usage_title`, `cost`, `cost_note`), for the pages that show
 * a stream finishing live: the timeline, the playground and compare (which import them from
 * here).
 */
import { count, fmt, money, num, t } from "../i18n.js";
import { EXAMPLE_PRICE } from "../vocabulary.js";

export function fmtMs(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  const a = Math.abs(v);
  if (a < 10) return num(v, 2);
  if (a < 1000) return num(v, 1);
  return num(Math.round(v));
}

/** A gap between events for prose: µs below a millisecond. */
export function fmtGap(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return `${num(Math.round(v * 1000))} µs`;
  return `${fmtMs(v)} ms`;
}

export function fmtDuration(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1000) return `${num(Math.round(v))} ms`;
  const s = v / 1000;
  if (s < 60) return `${num(s, 2)} s`;
  const total = Math.round(s);
  return `${num(Math.floor(total / 60))} min ${String(total % 60).padStart(2, "0")} s`;
}

export function fmtCount(v) {
  if (v === null || v === undefined) return "—";
  return count(Number(v));
}

// ---- usage and cost ------------------------------------------------------------------------
// From a stream's row columns as its frames carry them (streams/shapes/public.py: input_tokens,
// output_tokens, cached_input_tokens, reasoning_tokens, usage_source, cost_nanos,
// cost_currency, price_ref; with resolved_model or requested_model for why there is no price).
// The same rules as the server's: input → output tokens; an estimate marked "≈" (its tooltip
// and a hidden word say so); "no price" (muted), never 0, for a finished stream without one;
// "—" while it runs. The functions return nodes and strings to append (the price's name and
// model ids are data: text, never HTML).

const known = (v) => typeof v === "number" && Number.isFinite(v);
const countOr = (v) => (known(v) ? count(v) : "—");
const isEstimate = (f) => f.usage_source === "estimated";

/** "≈" before an estimated figure, with its tooltip and a word for screen readers. */
export function estimateMark() {
  const mark = document.createElement("span");
  mark.className = "estimate";
  mark.title = t("estimated: the upstream reported no usage");
  const sign = document.createElement("span");
  sign.setAttribute("aria-hidden", "true");
  sign.textContent = "≈";
  const word = document.createElement("span");
  word.className = "visually-hidden";
  word.textContent = `${t("estimated:")} `;
  mark.append(sign, word);
  return mark;
}

const marked = (f, text) => (isEstimate(f) ? [estimateMark(), text] : [text]);

/** Input → output tokens ("412 → 96"); "—" without usage. */
export function tokensNodes(f) {
  if (!f.usage_source) return ["—"];
  return marked(f, `${countOr(f.input_tokens)} → ${countOr(f.output_tokens)}`);
}

/** One token count, `which` "input" or "output". */
export function tokenCountNodes(f, which) {
  const value = f[`${which}_tokens`];
  if (!f.usage_source || !known(value)) return ["—"];
  return marked(f, count(value));
}

/** The line under a token count: "estimated", "12 cached", "30 reasoning", or "". */
export function tokenNote(f, which) {
  if (!f.usage_source) return "";
  if (isEstimate(f)) return t("estimated");
  if (which === "input" && known(f.cached_input_tokens)) {
    return fmt(t("%(n)s cached"), { n: count(f.cached_input_tokens) });
  }
  if (which === "output" && known(f.reasoning_tokens)) {
    return fmt(t("%(n)s reasoning"), { n: count(f.reasoning_tokens) });
  }
  return "";
}

/** What the token figures are, in full (a title); "" while the stream runs. */
export function usageTitle(f, finished) {
  if (!f.usage_source) return finished ? t("no usage: the stream had no answer to count") : "";
  const parts = [fmt(t("%(n)s input tokens"), { n: countOr(f.input_tokens) })];
  if (known(f.cached_input_tokens)) parts.push(fmt(t("%(n)s cached"), { n: count(f.cached_input_tokens) }));
  parts.push(fmt(t("%(n)s output tokens"), { n: countOr(f.output_tokens) }));
  if (known(f.reasoning_tokens)) parts.push(fmt(t("%(n)s reasoning"), { n: count(f.reasoning_tokens) }));
  const how = isEstimate(f) ? t("estimated: the upstream reported no usage") : t("reported by the upstream");
  return `${parts.join(", ")} (${how})`;
}

/** The model of a simulator example price's ref, else null. */
function exampleModel(ref) {
  const prefix = `${EXAMPLE_PRICE}: `;
  return typeof ref === "string" && ref.startsWith(prefix) ? ref.slice(prefix.length) : null;
}

/** The price's name: its ref, a simulator example price in words (nobody's real price). */
function priceName(ref) {
  const model = exampleModel(ref);
  if (model === null) return ref || "?";
  return fmt(t("an example price of the built-in simulator for %(model)s, not a real one"), { model });
}

/** The cost ("€0.00123", "≈€0.00123", "(example)" after one at a simulator example price),
 * "no price" once `finished` without one, else "—". */
export function costNodes(f, finished) {
  if (!finished) return ["—"];
  if (!known(f.cost_nanos)) {
    const none = document.createElement("span");
    none.className = "muted no-price";
    none.textContent = t("no price");
    return [none];
  }
  const shown = marked(f, money(f.cost_nanos, f.cost_currency));
  if (exampleModel(f.price_ref) === null) return shown;
  const example = document.createElement("span");
  example.className = "example-price";
  example.textContent = t("(example)");
  return [...shown, " ", example];
}

/** The price a cost was figured at, or why there is none; "" while the stream runs. */
export function costNote(f, finished) {
  if (!finished) return "";
  if (known(f.cost_nanos)) {
    const price = fmt(t("price: %(price)s"), { price: priceName(f.price_ref) });
    return isEstimate(f) ? `${t("estimated usage")} · ${price}` : price;
  }
  if (!f.usage_source) return t("no usage to price");
  if (!known(f.input_tokens) || !known(f.output_tokens)) return t("its input or output tokens are unknown");
  const model = f.resolved_model || f.requested_model;
  if (!model || model === "auto") return t("no model named to price");
  return fmt(t("no price known for %(model)s"), { model });
}
