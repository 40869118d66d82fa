// Memory: the notes an agent keeps about this credential's person (GET /memory), each with
// a button that deletes it (DELETE /memory/{id}). Nothing here reaches anyone else's notes:
// the API answers with the caller's own.

import { api, caller } from "./api.js";
import { h, notice, show, table, when } from "./dom.js";

const PAGE = 100;
const form = document.getElementById("memory-form");
const list = document.getElementById("memory");
const status = document.getElementById("memory-status");
const choice = form.elements.agent;

await caller;
try {
  const agents = await api("/agents");
  if (agents.length === 0) {
    show(list, notice("This repo has no agents."));
  } else {
    const first = agents.find((agent) => agent.default) ?? agents[0];
    show(
      choice,
      agents.map((agent) =>
        h("option", { value: agent.name, selected: agent === first }, agent.display_name),
      ),
    );
    choice.addEventListener("change", () => load());
    form.addEventListener("submit", (event) => event.preventDefault());
    form.hidden = false;
    await load();
  }
} catch (error) {
  show(list, notice(error.message, { problem: true }));
}

async function load() {
  const agent = choice.value;
  try {
    const page = await api(`/memory?agent=${encodeURIComponent(agent)}&limit=${PAGE}`);
    show(
      list,
      page.entries.length === 0
        ? notice(`${label(agent)} keeps no notes about you.`)
        : listed(page.entries),
    );
  } catch (error) {
    show(list, notice(error.message, { problem: true }));
  }
}

function listed(entries) {
  return table(
    `Notes ${label(choice.value)} keeps`,
    ["Note", "Kept since", "Shared with", ""],
    entries.map((entry) => [
      entry.text,
      when(entry.created_at),
      { user: "only you", scope: `everyone of ${entry.scope}`, agent: "everyone" }[entry.kind],
      h(
        "button",
        {
          type: "button",
          class: "secondary",
          "aria-label": `Delete note: ${entry.text}`,
          onclick: (event) => remove(entry, event.currentTarget),
        },
        "Delete",
      ),
    ]),
  );
}

async function remove(entry, button) {
  button.disabled = true;
  try {
    await api(`/memory/${encodeURIComponent(entry.id)}`, { method: "DELETE" });
    status.textContent = `Deleted: ${entry.text}`;
    await load();
  } catch (error) {
    button.disabled = false;
    status.textContent = `Not deleted: ${error.message}`;
  }
}

function label(name) {
  return choice.querySelector(`option[value="${CSS.escape(name)}"]`)?.textContent ?? name;
}
