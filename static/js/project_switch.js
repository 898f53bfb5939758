/**
 * project_switch.js — the top bar's project switcher (templates/base.html, dashboard/project.py
 * `switch_project`): a choice is sent at once. Without scripts the form's own button sends it.
 */
const select = document.getElementById("project-select");
if (select) {
  select.addEventListener("change", () => select.form.requestSubmit());
}
