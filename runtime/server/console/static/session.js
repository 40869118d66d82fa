// Session: its transcript (each reply with the agent that wrote it) and its run tree; a
// turn still running is followed to its end.

import { api, caller } from "./api.js";
import { h, notice, pages, show, when } from "./dom.js";
import { ended, followOn } from "./sse.js";
import { Transcript } from "./transcript.js";
import { RunTree } from "./tree.js";

const id = document.getElementById("main").dataset.sessionId;
const facts = document.getElementById("session-facts");
const transcript = new Transcript(document.getElementById("transcript"));
const tree = new RunTree(document.getElementById("tree"));

await caller;
try {
  const [session, runs] = await Promise.all([
    api(`/sessions/${encodeURIComponent(id)}`),
    api(`/sessions/${encodeURIComponent(id)}/runs`),
  ]);
  show(
    facts,
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "Agent"),
      h("dd", {}, session.agent),
      h("dt", {}, "Started"),
      h("dd", {}, when(session.created_at)),
      h("dt", {}, "Last activity"),
      h("dd", {}, when(session.updated_at)),
    ),
    h("p", {}, h("a", { href: pages.chat({ session: id }) }, "Continue in Chat")),
  );
  for (const event of session.events) transcript.apply(event);
  tree.load(runs.runs);
  // A turn still running (opened while a reply streams in): its events as they come, then
  // the tree as the turn left it.
  const apply = (event) => transcript.apply(event);
  if (!ended(session.events) && (await followOn(id, session.events, apply)) === "done") {
    tree.load((await api(`/sessions/${encodeURIComponent(id)}/runs`)).runs);
  }
} catch (error) {
  show(facts, notice(error.message, { problem: true }));
}
