// The evaluator form: only the chosen kind's fields are shown (without this script, all are).
const fieldsOf = JSON.parse(document.getElementById("evaluator-fields").textContent);
const kind = document.querySelector(".evaluator-form select[name=kind]");
const always = new Set(["name", "kind"]);

function show() {
  const wanted = new Set(fieldsOf[kind.value] || []);
  for (const field of document.querySelectorAll(".evaluator-form [data-field]")) {
    const name = field.dataset.field;
    field.hidden = !always.has(name) && !wanted.has(name);
  }
}

if (kind) {
  kind.addEventListener("change", show);
  show();
}
