// Page-wide htmx policy, loaded on every page (templates/base.html).
//
// Polling only while the tab is visible, without htmx's `[…]` trigger filters: those are
// evaluated with `Function(…)`, which the Content-Security-Policy (no 'unsafe-eval') refuses,
// and htmx's allowEval is off. An element with `data-poll-when-visible` skips its request
// while the page is hidden.
document.addEventListener("htmx:beforeRequest", (event) => {
  const elt = event.detail.elt || event.target;
  if (document.visibilityState !== "visible" && elt.hasAttribute("data-poll-when-visible")) {
    event.preventDefault();
  }
});
