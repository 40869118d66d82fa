// A conversation drawn from events: the live events of a turn (POST /chat's stream) and
// the stored log of GET /sessions/{id} alike, so the chat and the Sessions page draw a
// session the same way. Only the root run of each turn writes replies here; specialists'
// work shows in the delegation tree.

import { h, pretty } from "./dom.js";

const ROOT_STATUS = {
  model_stop: "ok",
  stop_execution: "ok",
  max_tool_calls: "partial",
  awaiting_choice: "waiting",
  awaiting_confirmation: "waiting",
  cancelled: "cancelled",
  error: "error",
};
const DONE_NOTES = {
  max_tool_calls: "The run spent its tool-call budget: this is a partial answer.",
  cancelled: "The turn was cancelled.",
};

export class Transcript {
  /**
   * `tree`: a RunTree to keep up to date (optional).
   * `actions`: {choose(option), decide(callId, approve)}; without them, choices and
   * confirmations are shown but not clickable.
   */
  constructor(element, { tree = null, actions = null } = {}) {
    this.element = element;
    this.tree = tree;
    this.actions = actions;
    this.reset();
  }

  reset() {
    this.element.replaceChildren();
    this.run = null; // the root run of the turn being drawn
    this.agent = null;
    this.reply = null; // that run's reply element, made when it has something to show
    this.calls = new Map(); // call_id -> {fold, name, arguments, answered}
    this.open = []; // choices and confirmations a later turn answers
  }

  apply(event) {
    const draw = this[`on_${event.type}`];
    if (draw === undefined) return; // usage, prompt and types this console does not draw
    const anyRun = ["session", "turn", "compaction", "subagent_start", "subagent_end"];
    if (anyRun.includes(event.type) || event.run_id === this.run) draw.call(this, event);
  }

  /** The person's message, as the chat sends it (the live stream does not echo it). */
  user(text) {
    this.element.append(
      h(
        "article",
        { class: "message from-user" },
        h("h3", { class: "who" }, "You"),
        h("div", { class: "text" }, text),
      ),
    );
  }

  /** A problem of the page itself (a refused request, a lost connection). */
  problem(text) {
    this.element.append(h("p", { class: "problem", role: "alert" }, text));
  }

  note(text) {
    this.element.append(h("p", { class: "note" }, text));
  }

  // --- a turn starts: live `session`, stored `turn`

  on_session(event) {
    this.begin(event.run_id, event.agent);
  }

  on_turn(event) {
    this.begin(event.run_id, event.agent);
  }

  begin(run, agent) {
    for (const waiting of this.open.splice(0)) waiting("Answered by a later message.");
    this.run = run;
    this.agent = agent;
    this.reply = null;
    this.tree?.upsert({ run_id: run, agent, depth: 0, status: "running" });
  }

  on_user(event) {
    this.user(event.text);
  }

  on_agent(event) {
    this.agent = event.to;
    this.element.append(
      h("p", { class: "handoff" }, `Handoff: ${event.from} → ${event.to}`),
    );
    this.tree?.upsert({ run_id: this.run, agent: event.to });
  }

  on_handoff(event) {
    this.element.append(
      h(
        "details",
        { class: "handoff-note" },
        h("summary", {}, `The note ${this.agent} was given`),
        h("pre", {}, event.text),
      ),
    );
  }

  on_surface_changed(event) {
    this.note(`What ${event.agent} may use changed since the last turn.`);
  }

  /** The model's view was compacted (SPEC 20): a folded marker; the transcript stays whole. */
  on_compaction(event) {
    const how = event.stage === "summary" ? "summarised" : "old tool results shortened";
    this.element.append(
      h(
        "details",
        { class: "compaction", "data-stage": event.stage },
        h(
          "summary",
          {},
          `Earlier conversation compacted (${how}): ` +
            `${event.before_tokens} → ${event.after_tokens} tokens`,
        ),
        h(
          "p",
          { class: "note" },
          `The model now sees ${event.covered} earlier entries in short; ` +
            "this transcript and the session's log keep every one.",
        ),
      ),
    );
  }

  // --- the reply

  on_text_delta(event) {
    const last = this.body().lastElementChild;
    const block = last !== null && last.classList.contains("text") ? last : this.block();
    block.textContent += event.text;
  }

  on_assistant(event) {
    if (event.text) this.block().textContent = event.text;
    for (const { id, function: called } of event.tool_calls || []) {
      this.on_tool_call({ call_id: id, name: called.name, arguments: parsed(called.arguments) });
    }
  }

  on_tool_call(event) {
    if (this.calls.has(event.call_id)) return;
    const call = { name: event.name, arguments: event.arguments, answered: false, fold: null };
    this.calls.set(event.call_id, call);
    if (event.name === "ask_choice") return; // drawn as its question and buttons
    call.status = h("span", { class: "status", "data-status": "running" }, "running");
    call.fold = h(
      "details",
      { class: "tool", "data-call-id": event.call_id },
      h("summary", {}, h("span", { class: "tool-name" }, event.name), " ", call.status),
      h("div", { class: "label" }, "Arguments"),
      h("pre", {}, pretty(event.arguments)),
    );
    this.body().append(call.fold);
  }

  on_tool_result(event) {
    const call = this.calls.get(event.call_id);
    if (call === undefined || call.fold === null) return;
    call.answered = true;
    call.status.textContent = `${event.status} · ${event.duration_ms} ms`;
    call.status.dataset.status = event.status;
    call.fold.append(
      h("div", { class: "label" }, event.status === "ok" ? "Result" : "Error"),
      h("pre", {}, pretty(event.status === "ok" ? event.result : event.error)),
    );
  }

  on_choice(event) {
    const asked = [...this.calls.values()].filter((c) => c.name === "ask_choice" && !c.answered);
    const call = asked.at(-1);
    if (call) call.answered = true;
    this.ask(event.question, event.options);
  }

  on_confirmation_required(event) {
    const call = this.calls.get(event.call_id);
    if (call) call.answered = true;
    this.confirm(event.call_id, event.name, event.arguments);
  }

  on_error(event) {
    this.body().append(h("p", { class: "problem", role: "alert" }, event.message));
  }

  on_done(event) {
    // A stored log has no `choice` or `confirmation_required`: what waits is known from
    // the calls of this turn that have no answer.
    for (const [callId, call] of this.calls) {
      if (call.answered) continue;
      if (event.reason === "awaiting_choice" && call.name === "ask_choice") {
        call.answered = true;
        this.ask(call.arguments.question, call.arguments.options);
      } else if (event.reason === "awaiting_confirmation" && call.fold !== null) {
        call.answered = true;
        this.confirm(callId, call.name, call.arguments);
      }
    }
    const note = DONE_NOTES[event.reason];
    if (note) this.body().append(h("p", { class: "note" }, note));
    if (this.reply !== null) {
      this.reply.setAttribute("aria-busy", "false");
      const { input, output } = event.usage || {};
      // A model that reports no usage (the offline one) says 0 and 0: nothing to show.
      if (input !== undefined && (input > 0 || output > 0)) {
        this.reply.append(h("p", { class: "usage" }, `${input} tokens in · ${output} out`));
      }
    }
    this.tree?.upsert({ run_id: this.run, status: ROOT_STATUS[event.reason] || event.reason });
    // Every call is decided by now, or waiting above for this turn's person.
    for (const call of this.calls.values()) call.answered = true;
  }

  // --- specialists: only the tree

  on_subagent_start(event) {
    this.tree?.upsert({
      run_id: event.run_id,
      parent_run_id: event.parent_run_id,
      agent: event.subagent,
      depth: event.depth,
      label: event.label,
      status: "running",
    });
  }

  on_subagent_end(event) {
    const { run_id, status, duration_ms } = event;
    this.tree?.upsert({ run_id, status, duration_ms });
  }

  // --- pieces

  body() {
    if (this.reply === null) {
      this.reply = h(
        "article",
        { class: "message reply", "data-agent": this.agent, "aria-busy": "true" },
        h("h3", { class: "who" }, this.agent),
        h("div", { class: "body" }),
      );
      this.element.append(this.reply);
    }
    return this.reply.querySelector(".body");
  }

  block() {
    const block = h("div", { class: "text" });
    this.body().append(block);
    return block;
  }

  ask(question, options) {
    const buttons = h("div", { class: "buttons" });
    const box = h(
      "div",
      { class: "ask", role: "group", "aria-label": question },
      h("p", {}, question),
      buttons,
    );
    const settle = this.waitFor(buttons);
    for (const option of options || []) {
      buttons.append(
        h("button", {
          type: "button",
          disabled: this.actions === null,
          onclick: () => {
            settle(`You chose: ${option}`);
            this.actions.choose(option);
          },
        }, option),
      );
    }
    this.body().append(box);
  }

  confirm(callId, name, args) {
    const call = this.calls.get(callId);
    if (call !== undefined && call.fold !== null) {
      call.status.textContent = "waiting for approval";
      call.status.dataset.status = "waiting";
    }
    const buttons = h("div", { class: "buttons" });
    const settle = this.waitFor(buttons);
    const decide = (approve) => () => {
      settle(approve ? "Approved." : "Denied.");
      this.actions.decide(callId, approve);
    };
    if (this.actions === null) {
      buttons.append(h("p", { class: "note" }, "Waiting for a decision (answer it in Chat)."));
    } else {
      buttons.append(
        h("button", { type: "button", onclick: decide(true) }, "Approve"),
        h("button", { type: "button", class: "secondary", onclick: decide(false) }, "Deny"),
      );
    }
    this.body().append(
      h(
        "div",
        { class: "ask confirm", role: "group", "aria-label": `Approve ${name}?` },
        h("p", {}, h("span", { class: "tool-name" }, name), " needs your approval to run with:"),
        h("pre", {}, pretty(args)),
        buttons,
      ),
    );
  }

  /** How a question's buttons are settled: by a click, or by a later turn; the first wins. */
  waitFor(buttons) {
    let settled = false;
    const settle = (text) => {
      if (settled) return;
      settled = true;
      buttons.replaceChildren(h("p", { class: "note" }, text));
    };
    this.open.push(settle);
    return settle;
  }
}

function parsed(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
