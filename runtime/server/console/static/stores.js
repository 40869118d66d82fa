// Stores (operators): the documents of a store in a scope, filtered. Another caller is
// told the page is not theirs, and nothing is asked of the API.

import { api, caller } from "./api.js";
import { h, notice, pretty, show, table, when } from "./dom.js";

const PAGE = 20;
const access = document.getElementById("stores-access");
const form = document.getElementById("store-form");
const documents = document.getElementById("documents");
let stores = [];
let offset = 0;

const who = await caller;
if (!who.operator) {
  show(access, notice("Stores are for operators: this credential cannot read them."));
} else {
  try {
    stores = await api("/stores");
    if (stores.length === 0) show(access, notice("This repo has no stores."));
    else await open();
  } catch (error) {
    show(access, notice(error.message, { problem: true }));
  }
}

async function open() {
  const choice = form.elements.store;
  show(
    choice,
    stores.map((store) =>
      h("option", { value: store.name }, `${store.name} (${store.documents} in scope default)`),
    ),
  );
  choice.addEventListener("change", describe);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    offset = 0;
    query();
  });
  describe();
  form.hidden = false;
  await query();
}

/** Name the fields of the chosen store, the ones a filter may use. */
function describe() {
  const store = stores.find((each) => each.name === form.elements.store.value);
  const fields = Object.keys(store.schema).join(", ");
  document.getElementById("store-fields").textContent = `Fields of ${store.name}: ${fields}.`;
}

async function query() {
  const { store, scope, filter } = form.elements;
  const params = new URLSearchParams({ limit: PAGE, offset });
  if (scope.value.trim()) params.set("scope", scope.value.trim());
  if (filter.value.trim()) params.set("filter", filter.value.trim());
  try {
    const page = await api(`/stores/${encodeURIComponent(store.value)}?${params}`);
    const first = page.total === 0 ? 0 : offset + 1;
    const last = offset + page.documents.length;
    show(
      documents,
      notice(
        `${page.total} document(s) in ${page.store}, scope ${page.scope}; ` +
          `showing ${first} to ${last}.`,
      ),
      page.documents.length === 0 ? null : h("div", { class: "scroll" }, listed(page)),
      h(
        "div",
        { class: "buttons" },
        offset > 0 ? button("Previous", () => turn(-PAGE)) : null,
        page.has_more ? button("Next", () => turn(PAGE)) : null,
      ),
    );
  } catch (error) {
    show(documents, notice(error.message, { problem: true }));
  }
}

function listed(page) {
  return table(
    `Documents of ${page.store}`,
    ["Key", "Version", "Updated", "Document"],
    page.documents.map((doc) => [
      h("code", {}, doc.key),
      String(doc.version),
      when(doc.updated_at),
      h("pre", {}, pretty(doc.document)),
    ]),
  );
}

function button(text, onclick) {
  return h("button", { type: "button", class: "secondary", onclick }, text);
}

function turn(by) {
  offset = Math.max(0, offset + by);
  query();
}
