// The runs: searched by id, workflow, status, tag, attributes and creation time, the filters
// kept in the address (a link or a bookmark is a saved search), a page at a time, with cancel
// and retry for the runs selected.
import {
  $, ACTIVE, STATUSES, TERMINAL, allowed, api, attributeLink, badge, confirmAction, el, empty, fill,
  live, note, post, readOnlyNote, runLink, shell, sync, took, when,
} from "../core.js";

const PAGE = 50;
const FIELDS = ["id", "workflow", "status", "tag", "created_from", "created_until"];
const REQUEUEABLE = ["failed", "dead", "cancelled"];
const cursors = [];  // the cursor of each page shown so far; the first page has none
let nextCursor = null;
const selected = new Set();

export default function runs() {
  shell("runs", "Runs");
  $("#page").append(
    el("div", { class: "page-head" }, el("h1", {}, "Runs"), el("p", { id: "summary", class: "muted" }, "loading…")),
    filterForm(),
    el("ul", { id: "counts", class: "chips", "aria-label": "Matching runs by status" }),
    el("div", { class: "toolbar", role: "toolbar", "aria-label": "Selected runs" },
      el("span", { id: "selection", class: "muted" }, "none selected"),
      el("button", { type: "button", id: "bulk-cancel", class: "danger", disabled: true, onclick: () => bulk("cancel") }, "Cancel selected"),
      el("button", { type: "button", id: "bulk-retry", disabled: true, onclick: () => bulk("retry") }, "Retry selected"),
      readOnlyNote()),
    el("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": "table" }, el("table", { class: "runs" },
      el("caption", { class: "sr-only" }, "Runs, newest first"),
      el("thead", {}, el("tr", {},
        el("th", { scope: "col", class: "check" }, el("input", { type: "checkbox", id: "select-all", "aria-label": "Select every run shown", onchange: selectAll })),
        ...["run", "workflow", "status", "created", "took", "tags", "attributes"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", { id: "runs" }))),
    el("nav", { class: "pager", "aria-label": "Pages" },
      el("button", { type: "button", id: "newest", disabled: true, onclick: restart }, "Newest"),
      el("button", { type: "button", id: "next", disabled: true, onclick: nextPage }, "Next page"),
      el("span", { id: "page-number", class: "muted" })));
  fillFrom(new URLSearchParams(location.search));
  live.start(load, draw, 3);
}

function filterForm() {
  const statuses = el("select", { id: "status", name: "status" }, el("option", { value: "" }, "any"),
    ...STATUSES.map((s) => el("option", { value: s }, s)));
  const field = (label, input) => el("label", { class: "field" }, el("span", {}, label), input);
  const form = el("form", { id: "filters", class: "filters card", role: "search" },
    field("run id", el("input", { id: "id", name: "id", size: 18, placeholder: "exact id", autocomplete: "off" })),
    field("workflow", el("input", { id: "workflow", name: "workflow", size: 14 })),
    field("status", statuses),
    field("tag", el("input", { id: "tag", name: "tag", size: 18, placeholder: "key:value" })),
    field("attributes", el("input", { id: "attributes", name: "attributes", size: 24, placeholder: "customer=acme tier=2", autocomplete: "off" })),
    field("created from", el("input", { id: "created_from", name: "created_from", type: "datetime-local" })),
    field("created until", el("input", { id: "created_until", name: "created_until", type: "datetime-local" })),
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary" }, "Search"),
      el("button", { type: "button", class: "ghost", onclick: clearFilters }, "Clear")));
  form.addEventListener("submit", (event) => { event.preventDefault(); restart(); });
  statuses.addEventListener("change", restart);
  return form;
}

function fillFrom(params) {
  for (const name of FIELDS) {
    const value = params.get(name) || "";
    $("#" + name).value = name.startsWith("created_") && value ? localInput(value) : value;
  }
  $("#attributes").value = [...params].filter(([name]) => name.startsWith(ATTR))
    .map(([name, value]) => `${name.slice(ATTR.length)}=${/\s/.test(value) && !value.startsWith('"') ? JSON.stringify(value) : value}`)
    .join(" ");
}

// The attributes field: `name=value` pairs apart by spaces, a value with spaces in JSON quotes
// (`name="Acme Corp"`); each is the address's `attr.<name>=<value>`, as the API reads it.
const ATTR = "attr.";
const PAIR = /([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)/g;

function attributeFilters() {
  return [...$("#attributes").value.matchAll(PAIR)].map(([, name, value]) => [ATTR + name, value]);
}

const localInput = (iso) => {
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
};

function filters() {
  const params = new URLSearchParams();
  for (const name of FIELDS) {
    const value = $("#" + name).value.trim();
    if (value) params.set(name, name.startsWith("created_") ? new Date(value).toISOString() : value);
  }
  for (const [name, value] of attributeFilters()) params.set(name, value);
  return params;
}

function clearFilters() {
  for (const name of [...FIELDS, "attributes"]) $("#" + name).value = "";
  restart();
}

function restart() {
  cursors.length = 0;
  selected.clear();
  // The search is the address: shareable, bookmarkable, restored by Back.
  const query = filters().toString();
  history.replaceState(null, "", query ? `?${query}` : location.pathname);
  live.refresh();
}

function nextPage() {
  if (nextCursor) { cursors.push(nextCursor); live.refresh(); }
}

async function load() {
  const params = filters();
  const id = params.get("id");
  if (id) return { ...(await api("/runs?" + params)), counts: null, byId: id };
  const counts = await api("/stats/runs?" + params);
  params.set("limit", String(PAGE));
  if (cursors.length) params.set("cursor", cursors.at(-1));
  return { ...(await api("/runs?" + params)), counts };
}

function draw(body) {
  sync($("#runs"), body.runs, (run) => run.id, row);
  if (!body.runs.length) fill($("#runs"), el("tr", {}, el("td", { colspan: 8 }, empty(body.byId ? `No run with id ${body.byId}.` : "No run matches."))));
  nextCursor = body.next_cursor;
  $("#next").disabled = !nextCursor;
  $("#newest").disabled = !cursors.length;
  $("#page-number").textContent = body.byId ? "" : `page ${cursors.length + 1}`;
  const counts = body.counts;
  $("#summary").textContent = counts ? `${counts.total} runs match` : `run ${body.byId}`;
  fill($("#counts"), ...(counts ? Object.entries(counts.counts) : []).map(([status, n]) =>
    el("li", {}, el("button", { type: "button", class: `chip status-${status}`,
      onclick: () => { $("#status").value = status; restart(); } }, `${n} ${status}`))));
  for (const id of [...selected]) if (!body.runs.some((r) => r.id === id)) selected.delete(id);
  showSelection();
}

function row(run) {
  const box = el("input", { type: "checkbox", class: "pick", "aria-label": `Select run ${run.id}`,
    checked: selected.has(run.id), onchange: (e) => { e.target.checked ? selected.add(run.id) : selected.delete(run.id); showSelection(); } });
  box.dataset.status = run.status;
  const settled = TERMINAL.includes(run.status);
  return el("tr", {},
    el("td", { class: "check" }, box),
    el("td", { class: "id" }, runLink(run.id)),
    el("td", {}, run.workflow, el("span", { class: "muted" }, "@" + run.version)),
    el("td", {}, badge(run.status)),
    el("td", {}, when(run.created_at)),
    el("td", { class: "num" }, settled ? took(run.created_at, run.updated_at) : el("span", { class: "muted" }, "running " + took(run.created_at))),
    el("td", { class: "tags" }, ...run.tags.map((tag) => el("a", { class: "tag", href: `?tag=${encodeURIComponent(tag)}` }, tag))),
    el("td", { class: "tags" }, ...Object.entries(run.attributes).map(([name, value]) => attributeLink(name, value))));
}

function selectAll(event) {
  for (const box of document.querySelectorAll("#runs input.pick")) {
    box.checked = event.target.checked;
    const id = box.closest("tr").dataset.item;
    event.target.checked ? selected.add(id) : selected.delete(id);
  }
  showSelection();
}

function selectedRuns() {
  return [...document.querySelectorAll("#runs input.pick:checked")].map((box) =>
    ({ id: box.closest("tr").dataset.item, status: box.dataset.status }));
}

function showSelection() {
  const runs = selectedRuns();
  $("#selection").textContent = runs.length ? `${runs.length} selected` : "none selected";
  $("#bulk-cancel").disabled = !allowed(runs.some((r) => ACTIVE.includes(r.status)));
  $("#bulk-retry").disabled = !allowed(runs.some((r) => REQUEUEABLE.includes(r.status)));
}

async function bulk(action) {
  const fits = action === "cancel" ? ACTIVE : REQUEUEABLE;
  const runs = selectedRuns().filter((r) => fits.includes(r.status));
  const verb = action === "cancel" ? "Cancel" : "Retry";
  const ok = await confirmAction(`${verb} ${runs.length} run${runs.length === 1 ? "" : "s"}?`,
    action === "cancel" ? "Each run and its children end cancelled; a step in flight finishes, its result discarded."
      : "Each run is requeued from its checkpoints (its gates apply as for a start).", verb);
  if (!ok) return;
  const results = await Promise.allSettled(runs.map((r) => post(`/runs/${encodeURIComponent(r.id)}/${action}`)));
  const failed = results.filter((r) => r.status === "rejected");
  note(`${verb}: ${runs.length - failed.length} done` + (failed.length ? `, ${failed.length} refused (${failed[0].reason.message})` : ""),
    failed.length ? "error" : "info");
  selected.clear();
  $("#select-all").checked = false;
  await live.refresh();
}
