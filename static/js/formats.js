/**
 * formats.js — the composers' format (templates/dashboard/playground_format.html): the scenario
 * list offers the chosen format's scenarios only (the simulator answers a request with its
 * format's, and the server refuses another's: CreateStreamForm.clean_scenario), and its
 * default option says what that format's default does.
 */

/** Keep `formatSelect`'s scenario list (its `data-scenarios` id) to the chosen format's. */
export function offerScenarios(formatSelect) {
  const scenarios = formatSelect && document.getElementById(formatSelect.dataset.scenarios);
  if (!scenarios) return;
  const apply = () => {
    for (const group of scenarios.querySelectorAll("optgroup[data-format]")) {
      const mine = group.dataset.format === formatSelect.value;
      group.hidden = group.disabled = !mine;
      if (mine) scenarios.querySelector("option[data-normal]").title = group.dataset.normal;
    }
    if (scenarios.selectedOptions[0]?.disabled || scenarios.selectedOptions[0]?.parentElement.disabled) {
      scenarios.value = "";
    }
    scenarios.dispatchEvent(new Event("change"));
  };
  formatSelect.addEventListener("change", apply);
  apply();
}
