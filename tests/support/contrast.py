"""WCAG 2 contrast, measured in the browser (Playwright's `evaluate`).

- `COLOUR_JS`: JavaScript helpers, `parse(css)` (a computed rgb()/rgba() colour as
  [r, g, b, a]), `over(top, bottom)` (source-over), `ratio(a, b)` (WCAG 2's contrast ratio of
  two opaque colours); the start of any script below.
- `PILLS`: each `.sev-pill` under a root, its text colour against its own background
  (tests/e2e/test_findings_e2e.py).
- `TEXTS`: every visible text on the page (each element with a text of its own, and form
  controls' values) against its effective background: the element's and its ancestors'
  backgrounds composited up to the first opaque one, with their opacity (a faded row fades its
  text too). Text of 24 px and up, or 18.66 px bold, needs 3:1, the rest 4.5:1 (WCAG AA).
  Returns `{checked, lowest, failures}`; `failures` sorted lowest first.
- `contrast_failures(page)`: `TEXTS` run on a page after its finite animations ended.

Not measured: text drawn on a canvas (the charts' axes), placeholders, generated content
(::before/::after), background images; disabled controls are exempt (WCAG 1.4.3).
"""

COLOUR_JS = r"""
const parse = (css) => {
  const m = /rgba?\(([^)]*)\)/.exec(css || "");
  if (!m) return null;
  const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
};
const over = (top, bottom) => {
  const a = top[3] + bottom[3] * (1 - top[3]);
  if (a === 0) return [0, 0, 0, 0];
  const mix = (i) => (top[i] * top[3] + bottom[i] * bottom[3] * (1 - top[3])) / a;
  return [mix(0), mix(1), mix(2), a];
};
const lum = ([r, g, b]) => [r, g, b].map((c) => {
  c /= 255;
  return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
}).reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
const ratio = (x, y) => {
  const [a, b] = [lum(x), lum(y)].sort((p, q) => q - p);
  return (a + 0.05) / (b + 0.05);
};
const hex = (c) => "#" + c.slice(0, 3)
  .map((v) => Math.round(v).toString(16).padStart(2, "0")).join("");
"""

PILLS = (
    "(root) => {"
    + COLOUR_JS
    + r"""
  return [...root.querySelectorAll(".sev-pill")].map((pill) => {
    const style = getComputedStyle(pill);
    return { text: pill.textContent, severity: pill.className.match(/sev-pill-(\w+)/)[1],
             color: style.color, title: pill.title,
             ratio: ratio(parse(style.color), parse(style.backgroundColor)) };
  });
}"""
)

TEXTS = (
    "() => {"
    + COLOUR_JS
    + r"""
  const WHITE = [255, 255, 255, 1];
  // the final colour of `colour` painted inside `el`, over its background and its ancestors'
  const flatten = (colour, el) => {
    let c = colour;
    for (let e = el; e; e = e.parentElement) {
      const style = getComputedStyle(e);
      c = over(c, parse(style.backgroundColor) || [0, 0, 0, 0]);
      const opacity = Number(style.opacity);
      if (opacity < 1) c = [c[0], c[1], c[2], c[3] * opacity];
    }
    return over(c, WHITE);
  };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    [...el.classList].map((c) => "." + c).join("");
  const path = (el) => {
    const parts = [];
    for (let e = el; e && e !== document.body && parts.length < 4; e = e.parentElement) {
      parts.unshift(name(e));
    }
    return parts.join(" > ");
  };
  const shown = (el) => {
    const hidden = "option, optgroup, script, style, template, noscript, .visually-hidden";
    if (el.closest(hidden)) return false;
    if (el.closest(":disabled")) return false; // inactive controls are exempt
    const visible = { visibilityProperty: true, contentVisibilityAuto: true };
    if (!el.checkVisibility(visible)) return false;
    const r = el.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) return false;
    // off the page (a skip link until focused)
    return r.right + window.scrollX > 0 && r.bottom + window.scrollY > 0;
  };
  const elements = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.textContent.trim() && n.parentElement) elements.add(n.parentElement);
  }
  const fields = "input:not([type=hidden]):not([type=checkbox]):not([type=radio])" +
    ":not([type=file]):not([type=range]):not([type=color]):not([type=submit]), select, textarea";
  for (const el of document.querySelectorAll(fields)) {
    if (el.tagName === "SELECT" ? el.selectedOptions.length : el.value) elements.add(el);
  }
  const failures = [];
  let lowest = null;
  let checked = 0;
  for (const el of elements) {
    if (!shown(el)) continue;
    const style = getComputedStyle(el);
    const text = parse(el instanceof SVGElement ? style.fill : style.color);
    if (!text) continue;
    checked += 1;
    const fg = flatten(text, el);
    const bg = flatten([0, 0, 0, 0], el);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
    const need = large ? 3 : 4.5;
    const r = ratio(fg, bg);
    const own = [...el.childNodes].filter((n) => n.nodeType === 3)
      .map((n) => n.textContent).join("");
    const found = { where: path(el), text: (own.trim() || el.value || "").slice(0, 50).trim(),
                    color: hex(fg), background: hex(bg), ratio: Math.round(r * 100) / 100, need };
    if (lowest === null || r < lowest.ratio) lowest = found;
    if (r < need) failures.push(found);
  }
  failures.sort((a, b) => a.ratio - b.ratio);
  return { checked, lowest, failures };
}"""
)

# Finite animations and transitions to their end (a new row's highlight, a flash): measured
# mid-way they would fail or pass by chance. Endless ones (a blinking caret) stay.
FINISH_ANIMATIONS = """() => document.getAnimations().forEach((a) => {
  if (a.effect && a.effect.getComputedTiming().endTime !== Infinity) a.finish();
})"""


def contrast_failures(page, open_details=True):
    """`TEXTS` on `page` (Playwright) once its finite animations have ended; with
    `open_details`, every <details> opened first (what a click shows is measured too)."""
    if open_details:
        page.evaluate(
            "() => document.querySelectorAll('details').forEach((d) => { d.open = true; })"
        )
        page.wait_for_timeout(50)
    page.evaluate(FINISH_ANIMATIONS)
    return page.evaluate(TEXTS)
