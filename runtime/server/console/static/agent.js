// Agent: its surface for the claims and context typed into the page, every exclusion
// with its reason, and the compiled system prompt (the browser's `amodal inspect`).

import { api, ApiError, caller } from "./api.js";
import { h, notice, pages, show, table } from "./dom.js";

const name = document.getElementById("main").dataset.agentName;
const facts = document.getElementById("agent-facts");
const form = document.getElementById("surface-form");
const surface = document.getElementById("surface");
const who = await caller;

try {
  const agent = await api(`/agents/${encodeURIComponent(name)}`);
  document.getElementById("agent-title").textContent = agent.display_name;
  show(
    facts,
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Name"),
      h("dd", {}, h("code", {}, agent.name)),
      h("dt", {}, "Role"),
      h("dd", {}, agent.role || "none"),
      h("dt", {}, "Default"),
      h("dd", {}, agent.default ? "yes: it answers chats that name no agent" : "no"),
      h("dt", {}, "Description"),
      h("dd", { class: "text" }, agent.description || "none"),
    ),
    h(
      "p",
      {},
      h("a", { href: pages.chat({ agent: agent.name }) }, `Chat with ${agent.display_name}`),
    ),
  );
} catch (error) {
  // `main` (unscoped chat) has a surface even when no agents/main folder exists.
  if (!(error instanceof ApiError && error.status === 404 && name === "main")) {
    show(facts, notice(error.message, { problem: true }));
  }
}

// Only the newest request's answer is drawn: the page's first one (no claims) may answer
// after one the person asked for since, and must not overwrite it.
let asked = 0;

form.addEventListener("submit", (event) => {
  event.preventDefault();
  inspect();
});
await inspect();

async function inspect() {
  const mine = ++asked;
  const query = new URLSearchParams();
  try {
    // Only an operator may ask for another caller's claims; anyone else sees their own.
    const claims = who.operator ? pairs("Claims", form.elements.claims.value) : [];
    claims.forEach(([key, value]) => query.append(`claim.${key}`, value));
    const context = pairs("Context", form.elements.context.value);
    context.forEach(([key, value]) => query.append(`context.${key}`, value));
    const view = await api(`/agents/${encodeURIComponent(name)}/surface?${query}`);
    if (mine === asked) show(surface, ...draw(view));
  } catch (error) {
    if (mine === asked) show(surface, notice(error.message, { problem: true }));
  }
}

function pairs(what, text) {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "")
    .map((line) => {
      const at = line.indexOf("=");
      if (at <= 0) throw new Error(`${what}: "${line}" is not key=value`);
      return [line.slice(0, at).trim(), line.slice(at + 1).trim()];
    });
}

function draw(view) {
  const none = (text = "none") => h("p", { class: "note" }, text);
  const list = (items) =>
    items.length === 0 ? none() : h("ul", { class: "names" }, items.map((it) => h("li", {}, it)));
  const stores = Object.entries(view.stores).map(([store, mode]) => `${store} (${mode})`);
  const excluded = view.excluded.map((item) => [item.kind, item.name, item.reason]);
  return [
    h("h3", {}, "Tools"),
    list(view.tools),
    h("h3", {}, "Skills"),
    list(view.skills),
    h("h3", {}, "Stores"),
    list(stores),
    h("h3", {}, "Specialists"),
    list(view.subagents),
    h("h3", {}, "Excluded"),
    excluded.length === 0
      ? none("Nothing: every declared resource is available.")
      : h("div", { class: "scroll" }, table("Excluded", ["Kind", "Name", "Reason"], excluded)),
    h("h3", {}, "System prompt"),
    h("pre", { class: "prompt" }, view.system_prompt),
    h("h3", {}, "Context prompt"),
    view.context_prompt === null ? none() : h("pre", { class: "prompt" }, view.context_prompt),
  ];
}
