// Automations (operators): each automation's trigger, next run and state, its last runs
// linked to their sessions, and the tool calls waiting for an operator's approval.

import { api, caller } from "./api.js";
import { h, notice, pages, pretty, show, table, when } from "./dom.js";

const RUNS = 5;
let again = null;
const access = document.getElementById("automations-access");
const overview = document.getElementById("automations");
const runs = document.getElementById("runs");
const pending = document.getElementById("pending");

const who = await caller;
if (!who.operator) {
  show(access, notice("Automations are for operators: this credential cannot manage them."));
} else {
  for (const id of ["overview-section", "pending-section", "runs-section"]) {
    document.getElementById(id).hidden = false;
  }
  await refresh();
}

async function refresh() {
  try {
    const { automations } = await api("/automations");
    if (automations.length === 0) {
      show(overview, notice("No automations: add automations/<name>.json to the repo."));
    } else {
      show(overview, listed(automations));
    }
    const working = automations.filter((each) => each.errors.length === 0);
    const recent = await Promise.all(
      working.map((each) =>
        api(`/automations/${encodeURIComponent(each.name)}/runs?limit=${RUNS}`),
      ),
    );
    const latest = recent.flatMap((answer) => answer.runs);
    show(runs, runsTable(latest));
    // A run still going changes soon: look again until none is.
    clearTimeout(again);
    if (latest.some((run) => ["running", "queued"].includes(run.status))) {
      again = setTimeout(refresh, 1000);
    }
    const { confirmations } = await api("/confirmations");
    show(
      pending,
      confirmations.length === 0 ? notice("Nothing is waiting.") : confirmations.map(waiting),
    );
  } catch (error) {
    show(access, notice(error.message, { problem: true }));
  }
}

function listed(automations) {
  return table(
    "Automations",
    ["Automation", "Trigger", "Next run", "State", "Last run", "Actions"],
    automations.map((each) => {
      if (each.errors.length > 0) {
        return [each.name, "broken", "", "", h("span", { class: "problem" }, each.errors[0]), ""];
      }
      const trigger = each.schedule ? `cron ${each.schedule} (${each.timezone})` : each.trigger;
      const last = each.last_run;
      return [
        each.name,
        trigger,
        when(each.next_run),
        each.paused ? "paused" : "active",
        last ? runLink(last) : "",
        h(
          "span",
          { class: "buttons" },
          button(`Run ${each.name} now`, "Run now", () => act(each.name, "run")),
          each.paused
            ? button(`Resume ${each.name}`, "Resume", () => act(each.name, "resume"))
            : button(`Pause ${each.name}`, "Pause", () => act(each.name, "pause")),
        ),
      ];
    }),
  );
}

function runsTable(rows) {
  if (rows.length === 0) return notice("No runs yet.");
  rows.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
  return table(
    "Runs",
    ["Automation", "Started", "Trigger", "Status", "Session"],
    rows.map((run) => [
      run.automation,
      when(run.created_at),
      run.trigger,
      run.error ? `${run.status}: ${run.error}` : run.status,
      run.session_id ? h("a", { href: pages.session(run.session_id) }, "Open session") : "",
    ]),
  );
}

function runLink(run) {
  const status = `${run.status} ${when(run.created_at)}`;
  return run.session_id ? h("a", { href: pages.session(run.session_id) }, status) : status;
}

function waiting(call) {
  const answer = (approve) => async () => {
    const session = encodeURIComponent(call.session_id);
    const path = `/sessions/${session}/confirmations/${encodeURIComponent(call.call_id)}`;
    try {
      await api(path, { method: "POST", body: { approve, stream: false } });
    } catch (error) {
      show(access, notice(error.message, { problem: true }));
    }
    await refresh();
  };
  const session = h("a", { href: pages.session(call.session_id) }, h("code", {}, call.session_id));
  return h(
    "div",
    { class: "ask confirm", role: "group", "aria-label": `Approve ${call.tool}?` },
    h("p", {}, `${call.agent} asks to run ${call.tool} in session `, session),
    h("pre", {}, pretty(call.arguments)),
    h(
      "span",
      { class: "buttons" },
      button(`Approve ${call.tool} in session ${call.session_id}`, "Approve", answer(true)),
      button(`Deny ${call.tool} in session ${call.session_id}`, "Deny", answer(false), "secondary"),
    ),
  );
}

function button(label, text, onclick, kind = null) {
  return h("button", { type: "button", "aria-label": label, class: kind, onclick }, text);
}

async function act(name, action) {
  try {
    await api(`/automations/${encodeURIComponent(name)}/${action}`, { method: "POST" });
  } catch (error) {
    show(access, notice(error.message, { problem: true }));
  }
  await refresh();
}
