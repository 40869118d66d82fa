// The delegation tree: one treeitem per run (a turn's root run, each specialist under
// the run that called it), labelled with its agent, showing status, depth and duration.
// Fed live by subagent_start/subagent_end events, or whole by GET /sessions/{id}/runs.

import { duration, h, show } from "./dom.js";

export class RunTree {
  constructor(element) {
    this.element = element;
    this.items = new Map(); // run_id -> {item, facts, group}
    element.addEventListener("keydown", (event) => this.move(event));
  }

  clear() {
    this.items.clear();
    this.element.replaceChildren();
  }

  /** Draw the runs of GET /sessions/{id}/runs (nested by `children`); items already drawn
   * are updated in place, so the keyboard focus stays where it was. */
  load(runs) {
    const add = (run) => {
      const ended = run.ended_at ? Date.parse(run.ended_at) - Date.parse(run.started_at) : null;
      this.upsert({ ...run, duration_ms: ended });
      run.children.forEach(add);
    };
    runs.forEach(add);
  }

  /**
   * Add a run, or update what is known of it:
   * {run_id, parent_run_id, agent, depth, label, status, duration_ms}.
   */
  upsert(run) {
    let entry = this.items.get(run.run_id);
    if (entry === undefined) entry = this.add(run);
    const known = { ...entry.run, ...definedOnly(run) };
    entry.run = known;
    // Through `show`, which leaves the absent pieces out: replaceChildren would write
    // a `null` duration as the text "null".
    show(
      entry.facts,
      h("span", { class: "agent" }, known.agent),
      h("span", { class: "status", "data-status": known.status }, known.status),
      h("span", { class: "depth" }, `depth ${known.depth}`),
      known.duration_ms !== null && known.duration_ms !== undefined
        ? h("span", { class: "duration" }, duration(known.duration_ms))
        : null,
      known.label ? h("span", { class: "task" }, known.label) : null,
    );
  }

  add(run) {
    const facts = h("div", { class: "facts" });
    const item = h(
      "li",
      { role: "treeitem", "aria-label": run.agent, "aria-level": run.depth + 1, tabindex: -1 },
      facts,
    );
    const parent = this.items.get(run.parent_run_id);
    if (parent === undefined) {
      this.element.append(item);
    } else {
      if (parent.group === null) {
        parent.group = h("ul", { role: "group" });
        parent.item.append(parent.group);
        parent.item.setAttribute("aria-expanded", "true");
      }
      parent.group.append(item);
    }
    const entry = { item, facts, group: null, run: {} };
    this.items.set(run.run_id, entry);
    this.focusable();
    return entry;
  }

  // One item takes the Tab stop; arrows, Home and End move between items.
  focusable() {
    const items = this.all();
    if (!items.some((item) => item.tabIndex === 0) && items.length > 0) items[0].tabIndex = 0;
  }

  move(event) {
    const items = this.all();
    const at = items.indexOf(document.activeElement);
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: items.length - 1 }[event.key];
    if (at < 0 || to === undefined || to < 0 || to >= items.length) return;
    event.preventDefault();
    items[at].tabIndex = -1;
    items[to].tabIndex = 0;
    items[to].focus();
  }

  all() {
    return [...this.element.querySelectorAll('[role="treeitem"]')];
  }
}

function definedOnly(run) {
  return Object.fromEntries(Object.entries(run).filter(([, value]) => value !== undefined));
}
