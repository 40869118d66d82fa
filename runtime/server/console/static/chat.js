// Chat: pick an agent, send messages, watch the reply stream in and the delegation tree
// grow; answer confirmations and choices with buttons. The session id is kept in the
// address (?session=), so a reload or a link brings the conversation back.

import { api, caller } from "./api.js";
import { h, pages, show } from "./dom.js";
import { ended, followOn, streamTurn } from "./sse.js";
import { Transcript } from "./transcript.js";
import { RunTree } from "./tree.js";

const form = document.getElementById("composer");
const picker = document.getElementById("agent");
const message = document.getElementById("message");
const send = document.getElementById("send");
const sessionLine = document.getElementById("session-line");
const tree = new RunTree(document.getElementById("tree"));
const transcript = new Transcript(document.getElementById("transcript"), {
  tree,
  actions: { choose: ask, decide },
});
const params = new URLSearchParams(location.search);
let sessionId = params.get("session");
// One request at a time per session (the server answers 409 to a second): each waits for
// the one before it to end. A click on Approve may come before its turn's `done`.
let inflight = Promise.resolve();
let running = 0;
// "New chat" starts a new generation: a turn of the previous one may still be streaming
// (it runs on to its end on the server); its events no longer belong on this page.
let generation = 0;

form.addEventListener("submit", (event) => {
  event.preventDefault();
  say(message.value);
});
message.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    say(message.value);
  }
});
document.getElementById("new-chat").addEventListener("click", () => {
  generation += 1;
  inflight = Promise.resolve();
  running = 0;
  send.disabled = false;
  adopt(null);
  transcript.reset();
  tree.clear();
  message.focus();
});
if (sessionId === null) adopt(null);
await caller;
await fillPicker();
if (sessionId !== null) await reopen();

async function fillPicker() {
  const agents = await api("/agents");
  const wanted = params.get("agent") || agents.find((agent) => agent.default)?.name;
  show(
    picker,
    agents.map((agent) =>
      h(
        "option",
        { value: agent.name, selected: agent.name === wanted },
        agent.display_name === agent.name ? agent.name : `${agent.display_name} (${agent.name})`,
      ),
    ),
  );
}

/** The composer's message: not while a turn of this chat runs (Send is disabled then). */
function say(text) {
  if (running > 0 || !text.trim()) return;
  message.value = "";
  ask(text);
}

/** Send a message: the composer's, or the option of a choice. */
async function ask(text) {
  transcript.user(text);
  const body = { message: text, agent: picker.value || undefined };
  if (sessionId !== null) body.session_id = sessionId;
  await run("/chat", body);
}

async function decide(callId, approve) {
  const session = encodeURIComponent(sessionId);
  await run(`/sessions/${session}/confirmations/${encodeURIComponent(callId)}`, { approve });
}

async function run(path, body) {
  await turn(async (current) => {
    const how = await streamTurn(path, body, (event) => {
      if (!current()) return;
      if (sessionId === null) adopt(event.session_id);
      transcript.apply(event);
    });
    if (how === "lost" && current()) await recover(current);
  });
}

/** Do `work(current)` as this page's turn: after the one before it, with Send disabled
 * meanwhile; `current()` is false once "New chat" was pressed. */
async function turn(work) {
  const mine = generation;
  const current = () => mine === generation;
  const previous = inflight;
  let finished;
  inflight = new Promise((resolve) => (finished = resolve));
  running += 1;
  send.disabled = true;
  await previous;
  try {
    await work(current);
  } catch (error) {
    if (current()) transcript.problem(error.message);
  } finally {
    finished();
    if (current()) {
      running -= 1;
      send.disabled = running > 0;
    }
  }
  if (current()) await refreshTree();
}

/** Draw the session from its log (a reload, or a link from the Sessions page). A turn
 * still running (the page was reloaded while a reply streamed in) is followed to its end,
 * as the turn this page sends would be. */
async function reopen() {
  let session;
  try {
    session = await redraw();
    if (session.events.length > 0) picker.value = session.agent;
    if (ended(session.events)) return await refreshTree();
  } catch (error) {
    adopt(null);
    transcript.problem(`Could not open the session: ${error.message}`);
    return;
  }
  await turn(async (current) => {
    const draw = (event) => current() && transcript.apply(event);
    const how = await followOn(sessionId, session.events, draw);
    if (how !== "done" && current()) await recover(current);
  });
}

/** The stream broke before `done`: draw what the log holds, then follow the turn to its end. */
async function recover(current) {
  const draw = (event) => current() && transcript.apply(event);
  for (let attempt = 0; attempt < 120 && current(); attempt += 1) {
    const session = await redraw();
    transcript.note("The connection to this turn was lost: this is the session's log.");
    if (ended(session.events)) return;
    if ((await followOn(sessionId, session.events, draw)) === "done") return;
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  if (current()) transcript.problem("The turn has not finished yet: reload the page later.");
}

async function redraw() {
  const session = await api(`/sessions/${encodeURIComponent(sessionId)}`);
  transcript.reset();
  for (const event of session.events) transcript.apply(event);
  return session;
}

async function refreshTree() {
  const asked = sessionId;
  if (asked === null) return;
  const runs = await api(`/sessions/${encodeURIComponent(asked)}/runs`);
  if (sessionId === asked) tree.load(runs.runs); // not if "New chat" was pressed meanwhile
}

function adopt(id) {
  sessionId = id;
  const address = new URLSearchParams(location.search);
  if (id === null) address.delete("session");
  else address.set("session", id);
  history.replaceState(null, "", address.size > 0 ? `?${address}` : location.pathname);
  show(
    sessionLine,
    id === null
      ? "A new session starts with your first message."
      : ["Session ", h("a", { href: pages.session(id) }, id)],
  );
}
