// Agents: the roster. Display name, name, role, the first line of the description, and
// which agent answers when a chat names none.

import { api, caller } from "./api.js";
import { firstLine, h, notice, pages, show, table } from "./dom.js";

const roster = document.getElementById("roster");

await caller;
try {
  const agents = await api("/agents");
  show(roster, agents.length === 0 ? notice("This repo has no agents.") : listed(agents));
} catch (error) {
  show(roster, notice(error.message, { problem: true }));
}

function listed(agents) {
  return table(
    "Agents",
    ["Agent", "Name", "Role", "Description", "Default", "Chat"],
    agents.map((agent) => [
      h("a", { href: pages.agent(agent.name) }, agent.display_name),
      h("code", {}, agent.name),
      agent.role || "",
      firstLine(agent.description),
      agent.default ? h("span", { class: "badge" }, "default") : "",
      h(
        "a",
        {
          href: pages.chat({ agent: agent.name }),
          "aria-label": `Chat with ${agent.display_name}`,
        },
        "Chat",
      ),
    ]),
  );
}
