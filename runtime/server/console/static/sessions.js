// Sessions: the sessions this credential may open (GET /sessions), newest activity first.

import { api, caller } from "./api.js";
import { h, notice, pages, show, table, when } from "./dom.js";

const PAGE = 50;
const list = document.getElementById("sessions");
const more = document.getElementById("more");
const rows = [];

more.addEventListener("click", () => load());
await caller;
await load();

async function load() {
  try {
    const page = await api(`/sessions?limit=${PAGE}&offset=${rows.length}`);
    rows.push(...page.sessions);
    more.hidden = page.sessions.length < PAGE;
    show(list, rows.length === 0 ? notice("No sessions yet: start one in Chat.") : listed());
  } catch (error) {
    show(list, notice(error.message, { problem: true }));
  }
}

function listed() {
  return table(
    "Sessions",
    ["Session", "Agent", "Last activity", "Started", "Chat"],
    rows.map((session) => [
      // Named by its first message; a session stored before the runtime kept one, by its id.
      h(
        "a",
        { href: pages.session(session.id), title: session.id },
        session.first_message || h("code", {}, session.id),
      ),
      session.agent,
      when(session.updated_at),
      when(session.created_at),
      h(
        "a",
        {
          href: pages.chat({ session: session.id }),
          "aria-label": `Continue session ${session.id} in Chat`,
        },
        "Continue",
      ),
    ]),
  );
}
