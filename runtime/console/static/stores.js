// Stores (operators): the documents of a store in a scope, filtered. Another caller is
// told the page is not theirs, and nothing is asked of the API.

import { api, caller } from "./api.js";
import { h, notice, pretty, show, table, when } from "./dom.js";

const PAGE = 20;
const access = document.getElementById("stores-access");
const form = document.getElementById("store-form");
const documents = document.getElementById("documents");
let offset = 0;

const who = await caller;
if (!who.operator) {
  show(access, notice("Stores are for operators: this credential cannot read them."));
} else {
  try {
    const stores = await api("/stores");
    if (stores.length === 0) {
      show(access, notice("This repo has no stores."));
    } else {
      show(
        form.elements.store,
        stores.map((store) => h("option", { value: store.name }, `${store.name} (${store.documents} in scope default)`)),
      );
      const fields = () => {
        const store = stores.find((s) => s.name === form.elements.store.value);
        document.getElementById("store-fields").textContent = `Fields of ${store.name}: ${Object.keys(store.schema).join(", ")}.`;
      };
      form.elements.store.addEventListener("change", fields);
      fields();
      form.hidden = false;
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        offset = 0;
        query();
      });
      await query();
    }
  } catch (error) {
    show(access, notice(error.message, { problem: true }));
  }
}

async function query() {
  const { store, scope, filter } = form.elements;
  const params = new URLSearchParams({ limit: PAGE, offset });
  if (scope.value.trim()) params.set("scope", scope.value.trim());
  if (filter.value.trim()) params.set("filter", filter.value.trim());
  try {
    const page = await api(`/stores/${encodeURIComponent(store.value)}?${params}`);
    const pager = h(
      "div",
      { class: "buttons" },
      offset > 0 ? h("button", { type: "button", class: "secondary", onclick: () => turn(-PAGE) }, "Previous") : null,
      page.has_more ? h("button", { type: "button", class: "secondary", onclick: () => turn(PAGE) }, "Next") : null,
    );
    const first = page.total === 0 ? 0 : offset + 1;
    show(
      documents,
      h("p", { class: "note" }, `${page.total} document(s) in ${page.store}, scope ${page.scope}; showing ${first} to ${offset + page.documents.length}.`),
      page.documents.length === 0
        ? null
        : h(
            "div",
            { class: "scroll" },
            table(
              `Documents of ${page.store}`,
              ["Key", "Version", "Updated", "Document"],
              page.documents.map((doc) => [h("code", {}, doc.key), String(doc.version), when(doc.updated_at), h("pre", {}, pretty(doc.document))]),
            ),
          ),
      pager,
    );
  } catch (error) {
    show(documents, notice(error.message, { problem: true }));
  }
}

function turn(by) {
  offset = Math.max(0, offset + by);
  query();
}
