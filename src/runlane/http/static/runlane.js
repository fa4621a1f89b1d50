// What every dashboard page shares: the API token (asked once, kept for the browser session),
// JSON requests, and small renderers. No build step, no dependencies.
"use strict";
const TOKEN_KEY = "runlane.token";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

function statusBadge(status) { return el("span", { class: "status " + status }, status); }
function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }
function runLink(id) { return el("a", { href: "/ui/runs/" + encodeURIComponent(id), class: "mono" }, id); }
function pretty(value) { return el("pre", {}, JSON.stringify(value, null, 2)); }

// A stored error as people read it: its type and message, then its traceback as the lines it
// is (JSON.stringify would show one string full of \n escapes), then its cause.
function errorBlock(error) {
  const block = el("div", { class: "error-block" },
    el("div", { class: "error" }, `${error.type || "Error"}: ${error.message || ""}`));
  if (error.traceback) block.append(el("pre", { class: "traceback" }, error.traceback));
  if (error.cause) block.append(el("div", { class: "muted" }, "caused by"), errorBlock(error.cause));
  return block;
}

class NeedsToken extends Error {}

// A JSON request; a 401 shows the token form, which retries the page's refresh once filled.
async function api(path, options = {}) {
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

function askToken() {
  if (document.getElementById("login")) return;
  const input = el("input", { type: "password", id: "token", "aria-label": "API token", size: "32" });
  const form = el("form", { id: "login" },
    el("label", { for: "token" }, "This API needs its token (RUNLANE_API_TOKEN): "), input,
    el("button", { type: "submit" }, "Use token"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value);
    form.remove();
    window.refresh && window.refresh();
  });
  document.querySelector("nav").after(form);
  input.focus();
}

// Calls refresh now and every `seconds`; a failure is shown, not thrown.
function keepFresh(refresh, seconds, problem) {
  window.refresh = async () => {
    try {
      await refresh();
      problem.textContent = "";
    } catch (err) {
      if (!(err instanceof NeedsToken)) problem.textContent = "refresh failed: " + err.message;
    }
  };
  window.refresh();
  setInterval(() => { if (!document.getElementById("login")) window.refresh(); }, seconds * 1000);
}
