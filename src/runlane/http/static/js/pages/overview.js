// The last hour, from the store: runs started and settled each minute, failures, latency; the
// active runs now; the lanes with runs waiting.
import { $, ACTIVE, api, duration, el, empty, fill, live, shell } from "../core.js";
import { bars } from "../charts.js";

export default function overview() {
  shell("overview", "Overview");
  $("#page").append(
    el("div", { class: "page-head" }, el("h1", {}, "Overview"),
      el("p", { class: "muted" }, "The last hour, counted by the store from runs' start and settlement times.")),
    el("section", { class: "tiles", id: "tiles", "aria-label": "The last hour" }),
    el("div", { class: "grid two" },
      el("section", { class: "card", "aria-labelledby": "throughput-title" },
        el("h2", { id: "throughput-title" }, "Throughput"),
        el("p", { class: "legend" }, el("span", { class: "key started" }), "started ",
          el("span", { class: "key completed" }), "completed ", el("span", { class: "key failed" }), "failed ",
          el("span", { class: "key cancelled" }), "cancelled"),
        el("div", { id: "throughput" })),
      el("section", { class: "card", "aria-labelledby": "latency-title" },
        el("h2", { id: "latency-title" }, "Latency"),
        el("p", { class: "muted" }, "From a run's start to its settlement; a percentile is the upper bound of its bucket."),
        el("div", { id: "latency" }))),
    el("div", { class: "grid two" },
      el("section", { class: "card", "aria-labelledby": "active-title" },
        el("h2", { id: "active-title" }, "Active runs"), el("div", { id: "active" })),
      el("section", { class: "card", "aria-labelledby": "busy-title" },
        el("h2", { id: "busy-title" }, "Busy lanes"), el("div", { id: "busy" }))));
  live.start(async () => ({ overview: await api("/overview"), lanes: await api("/lanes") }), draw, 5);
}

function tile(label, value, detail, cls = "") {
  return el("div", { class: `tile ${cls}` }, el("div", { class: "tile-label" }, label),
    el("div", { class: "tile-value" }, value), el("div", { class: "tile-detail muted" }, detail));
}

const seconds = (value) => value == null ? "—" : typeof value === "string" ? `${value} s` : `≤ ${duration(value * 1000)}`;

function draw({ overview, lanes }) {
  const t = overview.totals;
  const settled = t.completed + t.failed + t.cancelled;
  const failureRate = settled ? Math.round((t.failed / settled) * 1000) / 10 : 0;
  fill($("#tiles"), 
    tile("Started", t.started, "runs created"),
    tile("Completed", t.completed, `${Math.round(t.completed / 60 * 10) / 10} a minute`),
    tile("Failed", t.failed, `${failureRate}% of settled runs`, t.failed ? "bad" : ""),
    tile("Cancelled", t.cancelled, "runs"),
    tile("p50 latency", seconds(overview.latency.p50), "start to settlement"),
    tile("p95 latency", seconds(overview.latency.p95), "start to settlement"));
  const points = overview.minutes.map((m) => ({ ...m, label: new Date(m.at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) }));
  fill($("#throughput"), bars(points,
    [{ key: "completed", class: "completed" }, { key: "failed", class: "failed" }, { key: "cancelled", class: "cancelled" }],
    { label: `Runs settled each minute of the last hour: ${settled} in all, ${t.failed} failed` }),
  bars(points, [{ key: "started", class: "started" }],
    { label: `Runs started each minute of the last hour: ${t.started} in all`, height: 40 }),
  el("div", { class: "axis muted small", "aria-hidden": "true" }, el("span", {}, "an hour ago"), el("span", {}, "now")));
  fill($("#latency"), latencyTable(overview.latency));
  fill($("#active"), activeRuns(overview.active));
  fill($("#busy"), busyLanes(lanes.lanes));
}

function latencyTable(latency) {
  const total = latency.buckets.reduce((a, b) => a + b, 0);
  if (!total) return empty("No run settled in the last hour.");
  const labels = [...latency.bounds.map((b) => `≤ ${duration(b * 1000)}`), `> ${duration(latency.bounds.at(-1) * 1000)}`];
  return el("table", { class: "compact" },
    el("caption", { class: "sr-only" }, "Settled runs by latency"),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "took"), el("th", { scope: "col" }, "runs"), el("th", { scope: "col" }, "share"))),
    el("tbody", {}, ...latency.buckets.map((n, i) => n ? el("tr", {}, el("td", {}, labels[i]), el("td", { class: "num" }, n),
      el("td", {}, el("span", { class: "meter" }, el("span", { style: `width:${(n / total) * 100}%` })))) : null)));
}

function activeRuns(active) {
  const shown = ACTIVE.filter((s) => active[s]);
  if (!shown.length) return empty("No active run.");
  return el("ul", { class: "chips" }, ...shown.map((status) => el("li", {},
    el("a", { href: `/ui/runs?status=${status}`, class: `chip status-${status}` }, `${active[status]} ${status}`))));
}

function busyLanes(lanes) {
  const busy = lanes.filter((lane) => lane.waiting).sort((a, b) => b.waiting - a.waiting);
  if (!busy.length) return empty("No run waits for a lane.");
  return el("ul", { class: "plain" }, ...busy.slice(0, 8).map((lane) => el("li", {},
    el("a", { href: `/ui/lanes?key=${encodeURIComponent(lane.key)}`, class: "mono" }, lane.key), " ",
    el("span", { class: "muted" }, `${lane.usage} of ${lane.limit ?? "?"} held · ${lane.waiting} waiting`))));
}
