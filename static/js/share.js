/**
 * share.js — the "Copy" button of a new share link (templates/dashboard/share_created.html)
 * and of a new token (token_created.html). Each is shown once: copy it to the clipboard, or
 * select it for copying by hand where the clipboard is not available (a plain-http page on
 * another host than localhost).
 */
import { t } from "./i18n.js";

for (const button of document.querySelectorAll("button[data-copy]")) {
  const input = document.getElementById(button.dataset.copy);
  const status = document.getElementById("share-copied");
  button.addEventListener("click", async () => {
    input.focus();
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      if (status) status.textContent = button.dataset.done;
    } catch {
      if (status) status.textContent = t("Selected: copy it with Ctrl+C or ⌘C.");
    }
  });
}
