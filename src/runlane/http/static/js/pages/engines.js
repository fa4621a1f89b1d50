// Engines and workers: this server's engine (what it serves, its turns in flight) and the
// workers its transport heard announce themselves (their group, what they run, when heard).
import { $, api, el, empty, fill, live, shell, sync, when } from "../core.js";

// Where the page's data comes from: each source is fetched, then drawn into its section.
const SOURCES = [
  { path: "/engines", draw: drawFleet },
  { path: "/workers", draw: drawWorkers },
];

export default function engines() {
  shell("engines", "Engines & workers");
  $("#page").append(
    el("div", { class: "page-head" }, el("h1", {}, "Engines & workers")),
    el("section", { class: "card", "aria-labelledby": "fleet-title" },
      el("h2", { id: "fleet-title" }, "Engines in the store"),
      el("p", { class: "muted" }, "Each engine records what it serves (the workflow versions whose runs it claims) and beats every third of its lease; one silent for three leases is gone."),
      el("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": "engines" }, el("table", {},
        el("caption", { class: "sr-only" }, "Engines, oldest first"),
        el("thead", {}, el("tr", {}, ...["engine", "host", "state", "last beat", "serves", "groups"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", { id: "fleet" })))),
    el("section", { class: "card", "aria-labelledby": "unserved-title" },
      el("h2", { id: "unserved-title" }, "Versions no live engine serves"),
      el("div", { id: "unserved" })),
    el("section", { class: "card", "aria-labelledby": "this-engine" },
      el("h2", { id: "this-engine" }, "This server's engine"), el("div", { id: "engine" })),
    el("section", { class: "card", "aria-labelledby": "workers-title" },
      el("h2", { id: "workers-title" }, "Workers heard"),
      el("p", { class: "muted" }, "Workers announce themselves on the transport when they start and every ten heartbeats; this server's engine keeps what it heard."),
      el("div", { class: "table-wrap", tabindex: 0, role: "region", "aria-label": "table" }, el("table", {},
        el("caption", { class: "sr-only" }, "Workers, newest announcement first"),
        el("thead", {}, el("tr", {}, ...["worker", "group", "runs", "concurrency", "speaks", "last heard"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", { id: "workers" })))));
  live.start(() => Promise.all(SOURCES.map((source) => api(source.path))),
    (bodies) => bodies.forEach((body, i) => SOURCES[i].draw(body)), 3);
}

function drawWorkers(body) {
  const engine = body.engine;
  const fact = (label, ...value) => el("div", { class: "kv" }, el("dt", {}, label), el("dd", {}, ...value));
  fill($("#engine"), el("dl", { class: "kvs" },
    fact("id", el("span", { class: "mono" }, engine.id)),
    fact("host", `${engine.host} (pid ${engine.pid})`),
    fact("serving since", when(engine.started_at)),
    fact("namespace", engine.namespace == null ? "none (every namespace)" : engine.scope_reads ? `${engine.namespace} (reads fenced to it)` : `${engine.namespace} (reads shared)`),
    fact("executes runs", engine.drives ? "yes (its loop drives)" : "no (a producer: it reads and starts)"),
    fact("turns in flight", `${engine.turns_in_flight} of ${engine.turn_limit}`),
    fact("remote steps awaited", String(engine.remote_steps_awaited)),
    fact("transport", engine.transport || "none"),
    fact("workflows", engine.serves.length ? el("ul", { class: "chips" }, ...engine.serves.map((name) => el("li", { class: "chip" }, name))) : "none"),
    engine.groups.length ? fact("remote workflow groups", engine.groups.join(", ")) : null));
  sync($("#workers"), body.workers, (w) => w.worker, (w) => el("tr", {},
    el("td", { class: "mono" }, w.worker), el("td", {}, w.group),
    el("td", {}, [...(w.workflows || []), ...(w.steps || [])].join(", ") || "—"),
    el("td", { class: "num" }, w.concurrency ?? "—"),
    el("td", {}, `${w.language || "?"} ${w.version || ""} · protocol ${w.protocol}`),
    el("td", {}, when(w.at))));
  if (!body.workers.length) {
    fill($("#workers"), el("tr", {}, el("td", { colspan: 6 },
      empty(engine.transport ? "No worker announced itself yet." : "This engine has no transport: no remote worker can reach it."))));
  }
}

function drawFleet(body) {
  sync($("#fleet"), body.engines, (e) => e.id, (e) => el("tr", { "data-engine": e.id },
    el("td", { class: "mono" }, e.id),
    el("td", {}, `${e.host} (pid ${e.pid})${e.namespace ? " · " + e.namespace : ""}`),
    el("td", {}, el("span", { class: "badge " + (e.alive ? "running" : "dead") }, e.alive ? "alive" : "gone")),
    el("td", {}, when(e.last_beat_at)),
    el("td", {}, e.serves.length
      ? el("ul", { class: "chips" }, ...e.serves.map((s) => el("li", { class: "chip mono" }, `${s.workflow}@${s.version}`)))
      : "nothing (a producer)"),
    el("td", {}, e.groups.join(", ") || "—")));
  if (!body.engines.length) {
    fill($("#fleet"), el("tr", {}, el("td", { colspan: 6 }, empty("No engine has announced itself in this store."))));
  }
  fill($("#unserved"), body.unserved.length
    ? el("ul", {}, ...body.unserved.map((u) => el("li", { "data-code": `${u.workflow}@${u.version}` },
      el("span", { class: "mono" }, `${u.workflow}@${u.version}`), " · ",
      el("a", { href: "/ui/runs?workflow=" + encodeURIComponent(u.workflow) }, `${u.runs} active run${u.runs === 1 ? "" : "s"}`),
      " wait for an engine with this version")))
    : empty("None: every active run has a live engine that serves its version."));
}
