/**
 * save_view.js — "Save this view…" saves the filters the address has when it is submitted: a
 * page whose filters change through htmx (hx-push-url) moves the address, not the form's
 * hidden field rendered with the page (templates/dashboard/save_view.html).
 */
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.classList.contains("save-view-form")) return;
  form.elements.query.value = window.location.search.replace(/^\?/, "");
});
