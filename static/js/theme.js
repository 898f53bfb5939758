/**
 * theme.js — light, dark or the system's colours: the top bar's choice, remembered.
 *
 * A classic script in <head>, neither deferred nor a module: it sets <html data-theme> from
 * localStorage before the first paint, so a page never flashes the other theme. "light" and
 * "dark" set data-theme; "system" (the default) leaves it out, and app.css follows
 * prefers-color-scheme, as it does without scripts. The colours themselves are app.css's custom
 * properties.
 *
 * Whenever the theme in effect changes (the toggle, the system's setting while on "system",
 * another tab's choice), it dispatches `streamscope:theme` on document ({detail: {theme}}):
 * the charts redraw with the colours they read from the CSS (palette.js onThemeChange).
 */
(function () {
  const KEY = "streamscope-theme";
  const root = document.documentElement;
  const query = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function stored() {
    try {
      const value = window.localStorage.getItem(KEY);
      return value === "light" || value === "dark" ? value : "system";
    } catch {
      return "system"; // storage refused (privacy settings): the system's colours
    }
  }

  function apply(choice) {
    if (choice === "light" || choice === "dark") root.setAttribute("data-theme", choice);
    else root.removeAttribute("data-theme");
  }

  function inEffect() {
    return root.getAttribute("data-theme") || (query && query.matches ? "dark" : "light");
  }

  apply(stored());
  let current = inEffect();

  function changed() {
    const theme = inEffect();
    if (theme === current) return;
    current = theme;
    document.dispatchEvent(new CustomEvent("streamscope:theme", { detail: { theme } }));
  }

  function choose(choice) {
    try {
      if (choice === "system") window.localStorage.removeItem(KEY);
      else window.localStorage.setItem(KEY, choice);
    } catch {
      // not remembered; this page still changes
    }
    apply(choice);
    changed();
  }

  if (query) {
    if (query.addEventListener) query.addEventListener("change", changed);
    else if (query.addListener) query.addListener(changed);
  }

  function picker() {
    return document.getElementById("theme-choice");
  }

  // another tab chose: follow it
  window.addEventListener("storage", (e) => {
    if (e.key !== KEY && e.key !== null) return;
    apply(stored());
    const select = picker();
    if (select) select.value = stored();
    changed();
  });

  // the toggle (templates/base.html) is hidden until this script can run it
  function wire() {
    const select = picker();
    if (!select) return;
    select.value = stored();
    select.addEventListener("change", () => choose(select.value));
    const box = select.closest("[hidden]");
    if (box) box.hidden = false;
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
  else wire();
})();
