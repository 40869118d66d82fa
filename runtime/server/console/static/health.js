// Health: the bundle version, the errors of a failed reload (one `path:line: message`
// per line) and the MCP servers, from GET /health, refreshed every few seconds.

import { api } from "./api.js";
import { h, notice, show } from "./dom.js";

const EVERY_MS = 3000;
const health = document.getElementById("health");

await refresh();

async function refresh() {
  try {
    show(health, ...draw(await api("/health")));
  } catch (error) {
    show(health, notice(`The server does not answer: ${error.message}`, { problem: true }));
  }
  setTimeout(refresh, EVERY_MS);
}

function draw(status) {
  const errors = status.reload_error ? status.reload_error.split("\n") : [];
  return [
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Status"),
      h("dd", {}, status.status),
      h("dt", {}, "Bundle version"),
      h("dd", {}, h("code", {}, status.bundle_version)),
    ),
    h("h2", {}, "Reload errors"),
    errors.length === 0
      ? notice("None: the last reload succeeded.")
      : [
          h(
            "p",
            { class: "problem" },
            "The last reload failed; the bundle above keeps serving. Fix these and save:",
          ),
          h("ul", { class: "errors" }, errors.map((line) => h("li", {}, h("code", {}, line)))),
        ],
    h("h2", {}, "MCP servers"),
    mcp(status.mcp),
  ];
}

// `mcp` of /health: server name -> {status: ready|starting|failed, tools, error}.
function mcp(servers) {
  const entries = Object.entries(servers ?? {});
  if (entries.length === 0) return notice("No MCP servers are configured.");
  return h(
    "ul",
    { class: "names" },
    entries.map(([name, server]) =>
      h(
        "li",
        {},
        h("code", {}, name),
        " ",
        h("span", { class: "status", "data-status": server.status }, server.status),
        server.status === "ready" ? ` (${server.tools} tools)` : "",
        server.error ? `: ${server.error}` : "",
      ),
    ),
  );
}
