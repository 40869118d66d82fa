// Building pages from data. Every value goes in as text (text nodes, attributes),
// never as HTML: an agent's reply that holds "<script>" shows those characters.

/**
 * An element: h("a", {href: "/", class: "brand"}, "text", child, ...).
 * Attributes named on* become event listeners; null, undefined and false are left out.
 * Children are elements or strings (strings become text nodes).
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  element.append(...present(children));
  return element;
}

/** The console's own pages, by what they show. */
export const pages = {
  agent: (name) => `/console/agents/${encodeURIComponent(name)}`,
  chat: (query) => `/console/chat?${new URLSearchParams(query)}`,
  session: (id) => `/console/sessions/${encodeURIComponent(id)}`,
};

/** Replace what `element` shows. */
export function show(element, ...children) {
  element.replaceChildren(...present(children));
}

/** A message in place of data: a problem (announced at once) or a plain note. */
export function notice(text, { problem = false } = {}) {
  return h("p", { class: problem ? "problem" : "note", role: problem ? "alert" : null }, text);
}

/** A table: headers, and rows of cells (strings or elements). */
export function table(caption, headers, rows) {
  return h(
    "table",
    {},
    h("caption", { class: "visually-hidden" }, caption),
    h("thead", {}, h("tr", {}, headers.map((text) => h("th", { scope: "col" }, text)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell))))),
  );
}

/** JSON as a person reads it. */
export function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

export function firstLine(text) {
  return (text || "").split("\n", 1)[0];
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function present(children) {
  return children.flat().filter((child) => ![null, undefined, false].includes(child));
}
