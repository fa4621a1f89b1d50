// The lanes: each singleton lane and quota key (its holders, its waiters in order, its usage;
// the API lists a lane's first three of each unless the page is filtered to its key),
// each step queue, each run-level rate limit and debounce; and each lane over time, as this
// server sampled it.
import { $, api, badge, el, empty, fill, live, runLink, shell, sync, when } from "../core.js";
import { laneChart } from "../charts.js";

let samples = { lanes: [], times: [], interval: 5 };
const MOST_CARDS = 100;

export default function lanes() {
  shell("lanes", "Lanes");
  const key = el("input", { id: "key", name: "key", size: 24, placeholder: "store:A", value: new URLSearchParams(location.search).get("key") || "" });
  const form = el("form", { id: "filters", class: "filters card", role: "search" },
    el("label", { class: "field" }, el("span", {}, "key"), key),
    el("div", { class: "row" }, el("button", { type: "submit", class: "primary" }, "Filter")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    window.history.replaceState(null, "", key.value ? `?key=${encodeURIComponent(key.value)}` : location.pathname);
    live.refresh();
  });
  $("#page").append(
    el("div", { class: "page-head" }, el("h1", {}, "Lanes"), el("p", { id: "summary", class: "muted" }, "loading…")),
    form,
    el("p", { class: "muted small", id: "sampled" }),
    el("h2", {}, "Singleton lanes and quotas"), el("div", { id: "lanes", class: "cards" }), el("p", { id: "more-lanes", class: "muted small" }),
    el("h2", {}, "Step queues"), el("div", { id: "queues", class: "cards" }),
    el("h2", {}, "Rate limits and debounces"), el("div", { id: "limits", class: "cards" }));
  live.start(load, draw, 2);
}

async function load() {
  const key = $("#key").value.trim();
  const [body, sampled] = await Promise.all([api("/lanes" + (key ? "?key=" + encodeURIComponent(key) : "")), api("/lanes/history")]);
  return { body, sampled };
}

function draw({ body, sampled }) {
  samples = sampled;
  const minutes = Math.round((sampled.keep * sampled.interval) / 60);
  $("#sampled").textContent = `Charts: what this server sampled every ${sampled.interval} s since it started `
    + `(${sampled.times.length} samples, at most the last ${minutes} min); the store keeps no history of lane usage.`;
  // The busiest lanes first, and no more cards than a page can refresh every 2 s.
  const busiest = [...body.lanes].sort((a, b) => b.waiting - a.waiting || b.usage - a.usage).slice(0, MOST_CARDS);
  sync($("#lanes"), busiest, (lane) => `${lane.kind}:${lane.name}`, laneCard);
  if (!body.lanes.length) fill($("#lanes"), empty("No lane has active runs."));
  $("#more-lanes").textContent = body.lanes.length > MOST_CARDS
    ? `The ${MOST_CARDS} busiest of ${body.lanes.length} lanes are shown; filter by key for any other.` : "";
  sync($("#queues"), body.queues, (queue) => `queue:${queue.name}`, queueCard);
  if (!body.queues.length) fill($("#queues"), empty("No step queue registered."));
  sync($("#limits"), body.limits, (limit) => `${limit.kind}:${limit.name}`, (limit) => limit.kind === "debounce" ? debounceCard(limit) : rateCard(limit));
  if (!body.limits.length) fill($("#limits"), empty("No rate-limited start in its window, no pending debounce."));
  const waiting = body.lanes.reduce((n, lane) => n + lane.waiting, 0);
  $("#summary").textContent = `${body.lanes.length} busy lanes · ${waiting} runs waiting`;
}

function chart(name, label) {
  const series = samples.lanes.find((lane) => lane.name === name);
  if (!series || series.points.length < 2) return el("p", { class: "muted small" }, "Over time: not enough samples yet.");
  const last = series.points.at(-1);
  return el("figure", { class: "over-time" }, laneChart(series.points, series.limit,
    { label: `${label} over the last ${series.points.length} samples: now ${last[1]} in use, ${last[2]} waiting` }),
  el("figcaption", { class: "muted small" }, "in use (filled) and waiting (line) since ", when(samples.times[series.points[0][0]])));
}

function usage(used, limit) {
  return el("span", { class: "meter", role: "img", "aria-label": `${used} of ${limit ?? "unlimited"} in use` },
    el("span", { style: `width:${limit ? Math.min(100, (used / limit) * 100) : 0}%` }));
}

// A lane's holders or waiters as the API listed them; ``total`` counts them all, and a link to
// the lane's own page lists every one.
function people(runs, ordered, total, key) {
  if (!runs.length) return empty("none");
  const list = el(ordered ? "ol" : "ul", { class: "people" }, ...runs.map((run) => el("li", {},
    runLink(run.id), " ", badge(run.status), " ", el("span", { class: "muted" }, `${run.workflow} · since `), when(run.created_at))));
  if (total <= runs.length) return list;
  return el("div", {}, list, el("p", { class: "muted small" }, `and ${total - runs.length} more · `,
    el("a", { href: `/ui/lanes?key=${encodeURIComponent(key)}` }, "every one")));
}

// A lane of one namespace's own (its engine fences reads and keys to it) says whose it is.
const ofNamespace = (item) => item.namespace ? ` · namespace ${item.namespace}` : "";

function laneCard(lane) {
  const limit = lane.limit == null ? "?" : lane.limit;
  const scope = (lane.kind === "concurrency" ? "quota (every workflow)" : lane.workflow == null ? "singleton (global)" : `singleton of ${lane.workflow}`) + ofNamespace(lane);
  return el("section", { class: "card lane", dataset: { key: lane.key, kind: lane.kind } },
    el("h3", {}, el("span", { class: "mono" }, lane.key), " ", el("span", { class: "muted" }, scope)),
    el("p", {}, usage(lane.usage, lane.limit), ` ${lane.usage} of ${limit} in use · ${lane.waiting} waiting · `,
      el("a", { href: `/ui/runs?tag=${encodeURIComponent(lane.tag)}` }, "its runs")),
    chart(`${lane.kind}:${lane.name}`, `Lane ${lane.key}`),
    el("div", { class: "grid two" },
      el("div", {}, el("h4", {}, "holders"), people(lane.holders, false, lane.usage, lane.key)),
      lane.kind === "singleton" ? el("div", {}, el("h4", {}, "waiters, first in line first"), people(lane.waiters, true, lane.waiting, lane.key)) : null));
}

function entries(list, ordered) {
  if (!list.length) return empty("none");
  return el(ordered ? "ol" : "ul", { class: "people" }, ...list.map((e) => el("li", {}, runLink(e.run_id), ` step #${e.seq}`,
    el("span", { class: "muted" }, ` · key ${e.fairness_key} · priority ${e.priority} · `),
    e.admitted_at ? el("span", { class: "muted" }, "admitted ", when(e.admitted_at)) : el("span", { class: "muted" }, `turned away ${e.denials}×`))));
}

function queueCard(queue) {
  const limit = queue.concurrency == null ? "∞" : queue.concurrency;
  const rate = queue.rate ? ` · rate ${queue.rate.used} of ${queue.rate.limit} per ${queue.rate.period} s` : "";
  return el("section", { class: "card lane", dataset: { queue: queue.name, kind: "queue" } },
    el("h3", {}, el("span", { class: "mono" }, queue.name), " ", el("span", { class: "muted" }, `step queue · ${queue.fairness} · ${queue.order}`)),
    el("p", {}, queue.concurrency == null ? null : usage(queue.usage, queue.concurrency), ` ${queue.usage} of ${limit} slots · ${queue.waiters.length} waiting${rate}`),
    chart(`queue:${queue.name}`, `Step queue ${queue.name}`),
    el("div", { class: "grid two" },
      el("div", {}, el("h4", {}, "holding a slot"), entries(queue.holders, false)),
      el("div", {}, el("h4", {}, "waiters, first to be admitted first"), entries(queue.waiters, true))));
}

const scopeOf = (limit) => (limit.key == null ? `every start of ${limit.workflow}` : `${limit.kind === "debounce" ? "debounce" : "rate limit"} of ${limit.workflow}`) + ofNamespace(limit);

function rateCard(rate) {
  const next = rate.resets_at ? el("span", {}, "a start fits again ", when(rate.resets_at)) : "a start fits now";
  const counted = (run) => el("li", {}, runLink(run.id), " ", badge(run.status), el("span", { class: "muted" }, " · counted "), when(run.counted_at));
  return el("section", { class: "card lane", dataset: { limit: rate.name, kind: rate.kind } },
    el("h3", {}, el("span", { class: "mono" }, rate.key ?? rate.workflow), " ", el("span", { class: "muted" }, scopeOf(rate))),
    el("p", {}, usage(rate.used, rate.limit), ` ${rate.used} of ${rate.limit} starts in the last ${rate.period} s · `, next),
    chart(`rate_limit:${rate.name}`, `Rate limit ${rate.key ?? rate.workflow}`),
    el("h4", {}, "counted in the window"), rate.counted.length ? el("ul", { class: "people" }, ...rate.counted.map(counted)) : empty("none"),
    rate.held.length ? [el("h4", {}, "throttled, next to begin first"), el("ol", { class: "people" }, ...rate.held.map(counted))] : null);
}

function debounceCard(debounce) {
  return el("section", { class: "card lane", dataset: { limit: debounce.name, kind: debounce.kind } },
    el("h3", {}, el("span", { class: "mono" }, debounce.key ?? debounce.workflow), " ", el("span", { class: "muted" }, scopeOf(debounce))),
    el("p", {}, runLink(debounce.run.id), " ", badge(debounce.run.status), " fires ", when(debounce.fires_at), " · first start ", when(debounce.first_at)));
}
