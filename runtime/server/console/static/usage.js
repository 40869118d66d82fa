// Usage (operators): what model calls spent, by day and by agent as charts this page
// draws itself (inline SVG, no library), and the most expensive sessions, each linked to
// its transcript. Another caller is told the page is not theirs.

import { api, caller } from "./api.js";
import { h, notice, pages, show, table } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const access = document.getElementById("usage-access");
const form = document.getElementById("usage-form");
const total = document.getElementById("usage-total");
const byDay = document.getElementById("by-day");
const byAgent = document.getElementById("by-agent");
const bySession = document.getElementById("by-session");

const who = await caller;
if (!who.operator) {
  show(access, notice("Usage is for operators: this credential cannot read everyone's."));
} else {
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
  form.hidden = false;
  await load();
}

async function load() {
  const days = Number(form.elements.days.value);
  const since = new Date(Date.now() - days * 86400000).toISOString();
  const query = (group) => api(`/usage?${new URLSearchParams({ since, group_by: group })}`);
  try {
    const [daily, agents, sessions] = await Promise.all([
      query("day"),
      query("agent"),
      query("session"),
    ]);
    show(total, totals(daily.total, days));
    show(byDay, chart("Spend by day", daily.rows.map((row) => [row.day, row])));
    show(byAgent, chart("Spend by agent", agents.rows.map((row) => [row.agent, row])));
    show(bySession, expensive(sessions.rows.slice(0, 10)));
  } catch (error) {
    show(access, notice(error.message, { problem: true }));
  }
}

function totals(sum, days) {
  return notice(
    `${usd(sum.cost_usd)} over the last ${days} day(s): ${sum.model_calls} model call(s) ` +
      `in ${sum.turns} turn(s), ${count(sum.input_tokens)} input and ` +
      `${count(sum.output_tokens)} output tokens.`,
  );
}

/** A horizontal bar chart of cost (tokens when no price is known), drawn as SVG. */
function chart(title, entries) {
  if (entries.length === 0) return notice("No model calls in this period.");
  const value = (row) => row.cost_usd ?? 0;
  const priced = entries.some(([, row]) => value(row) > 0);
  const measure = priced ? value : (row) => row.input_tokens + row.output_tokens;
  const largest = Math.max(...entries.map(([, row]) => measure(row)), 1e-12);
  const bar = 22;
  const width = 600;
  const labels = 150;
  const room = width - labels - 90;
  const svg = node("svg", {
    viewBox: `0 0 ${width} ${entries.length * bar + 4}`,
    role: "img",
    "aria-label": `${title}: ${entries.map(([key, row]) => `${key} ${shown(row, priced)}`).join(", ")}`,
    class: "chart",
  });
  entries.forEach(([key, row], index) => {
    const y = index * bar + 2;
    const length = Math.max(1, (measure(row) / largest) * room);
    svg.append(
      text(labels - 6, y + 15, String(key ?? "-"), "end"),
      node("rect", { x: labels, y: y + 3, width: length.toFixed(1), height: bar - 6, rx: 2 }),
      text(labels + length + 6, y + 15, shown(row, priced), "start"),
    );
  });
  return h("figure", {}, svg);
}

function expensive(rows) {
  if (rows.length === 0) return notice("No sessions in this period.");
  return h("div", { class: "scroll" }, sessionTable(rows));
}

function sessionTable(rows) {
  return table(
    "Most expensive sessions",
    ["Session", "Cost (USD)", "Model calls", "Turns", "Tokens"],
    rows.map((row) => [
      h("a", { href: pages.session(row.session) }, row.session),
      usd(row.cost_usd),
      String(row.model_calls),
      String(row.turns),
      count(row.input_tokens + row.output_tokens),
    ]),
  );
}

function node(tag, attributes) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

function text(x, y, content, anchor) {
  const label = node("text", { x, y, "text-anchor": anchor });
  label.textContent = content; // as text, never markup
  return label;
}

function shown(row, priced) {
  return priced ? usd(row.cost_usd) : `${count(row.input_tokens + row.output_tokens)} tokens`;
}

function usd(value) {
  return value === null || value === undefined ? "unknown" : `$${value.toFixed(4)}`;
}

function count(value) {
  return value.toLocaleString("en");
}
