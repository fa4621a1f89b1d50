// What every page of the console shares: requests to the API (with the token the browser keeps
// for the session), building DOM, times and durations, the live loop that redraws only what
// changed, confirmations, and the page shell. Plain ES modules: no build step, no dependencies.

const TOKEN_KEY = "runlane.token";
const THEME_KEY = "runlane.theme";
export const ACTIVE = ["pending", "running", "suspended", "blocked", "paused", "cancelling"];
export const TERMINAL = ["completed", "failed", "cancelled", "dead"];
export const STATUSES = [...ACTIVE, ...TERMINAL];

// ------------------------------------------------------------------ DOM

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child == null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
}

// `node`'s children become `children` (nulls and falses left out, lists flattened).
export function fill(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) if (value != null) node.setAttribute(name, value);
  append(node, children);
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);

// ------------------------------------------------------------------ the API

export class NeedsToken extends Error {}

export async function api(path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  // Never from the browser's cache: a run's address also answers browsers with its page.
  const response = await fetch(path, { cache: "no-store", ...options, headers });
  if (response.status === 401) {
    askToken();
    throw new NeedsToken("this API needs a token");
  }
  const body = await response.json();
  if (!response.ok) throw new Error(body.message || response.statusText);
  return body;
}

export const post = (path, body) => api(path, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: body === undefined ? undefined : JSON.stringify(body),
});

// ------------------------------------------------------------------ the caller's scope

// What the token in use may do (GET /whoami), asked once before a page is drawn: a token of
// scope read sees every action disabled, with a note saying why.
export const access = { readOnly: false, name: "" };

export async function loadAccess() {
  try {
    const who = await api("/whoami");
    access.readOnly = who.scope === "read";
    access.name = who.name;
  } catch (err) {
    // No token yet: the prompt asks for one, and the page is drawn again with it.
  }
}

// Whether an action's control is enabled: `applies`, and the caller may operate.
export const allowed = (applies = true) => applies && !access.readOnly;

// Said where the actions are, to a caller whose token may only read.
export function readOnlyNote() {
  if (!access.readOnly) return null;
  return el("p", { class: "read-only-note", role: "note" },
    `This token (${access.name}) may only read: its actions need a token of scope operate.`);
}

// A popover form of an action (a signal, an update, a fork), for a caller who may only read:
// its opener and its fields are disabled.
export function guardForm(details) {
  if (!access.readOnly) return details;
  details.querySelector("summary").setAttribute("aria-disabled", "true");
  for (const field of details.querySelectorAll("input, textarea, button")) field.disabled = true;
  return details;
}

function askToken() {
  if ($("#login")) return;
  const input = el("input", { type: "password", id: "token", autocomplete: "off", size: "32" });
  const form = el("form", { id: "login", class: "card login" },
    el("label", { for: "token" }, "This API needs a token (RUNLANE_API_TOKENS)"), input,
    el("button", { type: "submit", class: "primary" }, "Use token"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value);
    location.reload(); // drawn again with the token, and what its scope allows
  });
  $("main").prepend(form);
  input.focus();
}

// ------------------------------------------------------------------ times

const UNITS = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];

export function duration(ms) {
  if (ms == null || Number.isNaN(ms)) return "";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 10000) return `${(ms / 1000).toFixed(2)} s`;
  let seconds = Math.round(ms / 1000);
  const parts = [];
  for (const [unit, size] of UNITS) {
    if (seconds >= size && parts.length < 2) {
      parts.push(`${Math.floor(seconds / size)} ${unit}`);
      seconds %= size;
    }
  }
  return parts.join(" ");
}

export function relative(iso, now = Date.now()) {
  const ms = Date.parse(iso) - now;
  if (Math.abs(ms) < 1000) return "now";
  // The largest unit only: "3 min ago", "in 2 h".
  const seconds = Math.abs(ms) / 1000;
  const [unit, size] = UNITS.find(([, size]) => seconds >= size);
  const text = `${Math.floor(seconds / size)} ${unit}`;
  return ms < 0 ? `${text} ago` : `in ${text}`;
}

export function absolute(iso) {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

// A time as people read it (relative), with the absolute one on hover and for machines.
export function when(iso) {
  if (!iso) return el("span", { class: "muted" }, "—");
  return el("time", { datetime: iso, title: absolute(iso), dataset: { relative: "" } }, relative(iso));
}

// Relative times age without a redraw.
setInterval(() => {
  for (const node of document.querySelectorAll("time[data-relative]")) {
    node.textContent = relative(node.getAttribute("datetime"));
  }
}, 5000);

export function took(from, to) {
  if (!from) return "";
  return duration((to ? Date.parse(to) : Date.now()) - Date.parse(from));
}

// ------------------------------------------------------------------ small pieces

export function badge(status) {
  return el("span", { class: `status status-${status}` }, status);
}

export const runHref = (id) => "/ui/runs/" + encodeURIComponent(id);
export const runLink = (id) => el("a", { href: runHref(id), class: "mono" }, id);

// An attribute's value as a filter writes it (`attr.<name>=<text>`, as the API reads it): a
// string that would read as a number, a boolean or a JSON string goes in JSON quotes.
export function attributeText(value) {
  if (typeof value !== "string") return String(value);
  let read;
  try {
    read = JSON.parse(value);
  } catch {
    return value;
  }
  return read !== null && typeof read !== "object" ? JSON.stringify(value) : value;
}

// An attribute as a link to the runs that have it too.
export function attributeLink(name, value) {
  const query = new URLSearchParams([["attr." + name, attributeText(value)]]);
  return el("a", { class: "tag", href: "/ui/runs?" + query }, `${name}=${attributeText(value)}`);
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

export function copyButton(text, what) {
  return el("button", {
    type: "button", class: "ghost small", "aria-label": `Copy ${what}`,
    onclick: async (event) => {
      await navigator.clipboard?.writeText(typeof text === "function" ? text() : text);
      event.target.textContent = "Copied";
      setTimeout(() => { event.target.textContent = "Copy"; }, 1500);
    },
  }, "Copy");
}

// A JSON value folded: its first line as the summary, the whole of it inside, copyable.
export function folded(label, value, key, open = false) {
  const text = json(value);
  return el("details", { class: "folded", dataset: { key }, open },
    el("summary", {}, el("span", { class: "label" }, label), " ",
      el("code", { class: "preview" }, text.length > 80 ? text.slice(0, 77) + "…" : text)),
    el("div", { class: "fold-body" }, copyButton(text, label),
      el("pre", { class: "code", tabindex: 0, "aria-label": label }, text)));
}

// A stored error as people read it: type and message, the traceback as the lines it is, the cause.
export function errorBlock(error) {
  const block = el("div", { class: "error-block" },
    el("p", { class: "error-line" }, el("strong", {}, error.type || "Error"), ": ", error.message || ""));
  if (error.traceback) {
    block.append(el("div", { class: "trace-head" }, el("span", { class: "muted" }, "traceback"),
      copyButton(error.traceback, "traceback")),
    el("pre", { class: "traceback", tabindex: 0, "aria-label": "traceback" }, error.traceback));
  }
  if (error.handler_error) block.append(el("p", { class: "muted" }, "its failure handler could not start:"), errorBlock(error.handler_error));
  if (error.cause) block.append(el("p", { class: "muted" }, "caused by"), errorBlock(error.cause));
  return block;
}

export function empty(text) {
  return el("p", { class: "empty" }, text);
}

// The same, as the one item of an empty list.
export function emptyItem(text) {
  return el("li", { class: "empty" }, text);
}

// ------------------------------------------------------------------ confirmations and notes

export function confirmAction(title, text, label = "Confirm") {
  return new Promise((resolve) => {
    const dialog = el("dialog", { class: "card confirm", "aria-labelledby": "confirm-title" },
      el("h2", { id: "confirm-title" }, title), el("p", {}, text),
      el("form", { method: "dialog", class: "row" },
        el("button", { value: "cancel", class: "ghost" }, "Keep it"),
        el("button", { value: "ok", class: "danger", autofocus: true }, label)));
    dialog.addEventListener("close", () => { resolve(dialog.returnValue === "ok"); dialog.remove(); });
    document.body.append(dialog);
    dialog.showModal();
  });
}

export function note(text, kind = "info") {
  const region = $("#notes");
  const item = el("div", { class: `note note-${kind}`, role: kind === "error" ? "alert" : "status" }, text);
  region.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

// ------------------------------------------------------------------ keyed redraws

// The children of `container` become one node per item, by key (its data-item): a node whose
// item did not change is left as it is (what the reader opened, focused or selected in it
// stays), a changed one is rebuilt with its open <details> kept open, and the order follows
// the items.
export function sync(container, items, keyOf, build) {
  const old = new Map([...container.children].filter((n) => n.dataset.item != null).map((n) => [n.dataset.item, n]));
  const nodes = items.map((item) => {
    const key = String(keyOf(item));
    const signature = JSON.stringify(item);
    const existing = old.get(key);
    if (existing && existing.__signature === signature) return existing;
    const node = build(item);
    node.dataset.item = key;
    node.__signature = signature;
    if (existing) keepOpen(existing, node);
    return node;
  });
  nodes.forEach((node, i) => {
    if (container.children[i] !== node) container.insertBefore(node, container.children[i] || null);
  });
  while (container.children.length > nodes.length) container.lastElementChild.remove();
}

function keepOpen(from, to) {
  const opened = new Set([...from.querySelectorAll("details[open]")].map((d) => d.dataset.key));
  if (from.matches("details[open]")) to.open = true;
  for (const details of to.querySelectorAll("details")) {
    if (opened.has(details.dataset.key)) details.open = true;
  }
}

// ------------------------------------------------------------------ the live loop

// Polls the page's data every `seconds` while the tab is visible, and redraws only when the
// answer changed; a failure is said once in the page, not thrown.
export const live = {
  draw: null,
  seconds: 2,
  last: null,
  timer: null,
  async now() {
    clearTimeout(this.timer);
    try {
      const data = await this.load();
      const text = JSON.stringify(data);
      if (text !== this.last) {
        this.last = text;
        this.draw(data);
      }
      setProblem("");
    } catch (err) {
      if (!(err instanceof NeedsToken)) setProblem("refresh failed: " + err.message);
    }
    this.timer = setTimeout(() => this.tick(), this.seconds * 1000);
  },
  tick() {
    if (document.visibilityState === "hidden" || $("#login") || $("dialog[open]")) {
      this.timer = setTimeout(() => this.tick(), this.seconds * 1000);
      return;
    }
    this.now();
  },
  start(load, draw, seconds = 2) {
    Object.assign(this, { load, draw, seconds });
    document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") this.now(); });
    this.now();
  },
  // After an action: fetch again now, and redraw even if nothing seems to have changed.
  async refresh() { this.last = null; await this.now(); },
};

function setProblem(text) {
  const problem = $("#problem");
  if (problem.textContent !== text) problem.textContent = text;
  problem.hidden = !text;
}

// ------------------------------------------------------------------ the shell

export const PAGES = [
  ["overview", "/", "Overview"],
  ["runs", "/ui/runs", "Runs"],
  ["lanes", "/ui/lanes", "Lanes"],
  ["schedules", "/ui/schedules", "Schedules"],
  ["engines", "/ui/engines", "Engines & workers"],
];

export function shell(current, title) {
  document.title = `${title} · runlane`;
  const nav = el("nav", { "aria-label": "Console" },
    el("a", { href: "/", class: "brand" }, el("span", { class: "logo", "aria-hidden": "true" }), "runlane"),
    el("ul", {}, ...PAGES.map(([name, href, label]) => el("li", {},
      el("a", { href, "aria-current": name === current ? "page" : null }, label)))),
    el("button", { type: "button", class: "ghost small theme", onclick: toggleTheme,
      "aria-label": "Switch between light and dark" }, "◐"));
  document.body.prepend(el("a", { href: "#main", class: "skip" }, "Skip to content"),
    el("header", { class: "top" }, nav));
}

// The theme chosen with the switch, else the system's (followed as it changes).
const systemDark = matchMedia("(prefers-color-scheme: dark)");

export function applyTheme() {
  const chosen = localStorage.getItem(THEME_KEY);
  document.documentElement.dataset.theme = chosen || (systemDark.matches ? "dark" : "light");
}

systemDark.addEventListener("change", applyTheme);

function toggleTheme() {
  const next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
  localStorage.setItem(THEME_KEY, next);
  document.documentElement.dataset.theme = next;
}
