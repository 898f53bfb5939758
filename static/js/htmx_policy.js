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

// A 400 answers a form with what was wrong (the feedback panel's score and comment forms), a 429
// says when to try again (the streams list's search): htmx swaps only 2xx answers, so an element
// inside `data-swap-invalid` swaps those too.
document.addEventListener("htmx:beforeSwap", (event) => {
  const elt = event.detail.elt || event.target;
  const status = event.detail.xhr.status;
  if ((status === 400 || status === 429) && elt.closest("[data-swap-invalid]")) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
