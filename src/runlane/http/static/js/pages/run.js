// One run: what it waits for, its steps on a timeline (attempts, retries, waits), each step's
// input, output and error, the run's own, its children, its history to download, and the
// actions an operator takes on it, each confirmed.
import {
  $, ACTIVE, TERMINAL, absolute, api, attributeLink, badge, confirmAction, duration, el, emptyItem,
  errorBlock, fill, folded, json, live, note, post, runLink, shell, sync, took, when,
} from "../core.js";

const REQUEUEABLE = ["failed", "dead", "cancelled"];
const WAITS = ["sleep", "signal", "event", "child", "start_child"];
let runId;
let path;

// The actions on a run: when each applies, how it is confirmed, what it calls. An action the
// engine gains (pause, resume, fork, update) is one more entry here.
const ACTIONS = [
  {
    name: "cancel", label: "Cancel", danger: true,
    applies: (run) => ACTIVE.includes(run.status),
    confirm: (run) => [`Cancel ${run.id}?`, "The run and its children end cancelled; a step in flight finishes and its result is discarded."],
    call: () => post(path + "/cancel"),
  },
  {
    name: "retry", label: "Retry",
    applies: (run) => REQUEUEABLE.includes(run.status),
    confirm: (run) => [`Retry ${run.id}?`, "It is requeued from its checkpoints: recorded steps are not run again."],
    call: () => post(path + "/retry"),
  },
];

export default function run(id) {
  runId = id;
  path = "/runs/" + encodeURIComponent(id);
  shell("runs", id);
  $("#page").append(
    el("nav", { class: "crumbs", "aria-label": "Breadcrumb" }, el("a", { href: "/ui/runs" }, "Runs"), " / ", el("span", { class: "mono" }, id)),
    el("div", { class: "page-head run-head" },
      el("h1", {}, el("span", { class: "muted" }, "run "), el("span", { id: "run-id", class: "mono" }, id), " ", el("span", { id: "status" })),
      el("p", { id: "facts", class: "facts" })),
    el("section", { id: "waiting", class: "callout", "aria-live": "polite", hidden: true }),
    el("div", { class: "toolbar", role: "toolbar", "aria-label": "Actions" },
      ...ACTIONS.map((action) => el("button", { type: "button", id: action.name, disabled: true,
        class: action.danger ? "danger" : "", onclick: () => act(action) }, action.label)),
      signalForm(),
      el("button", { type: "button", id: "export", class: "ghost", onclick: exportHistory }, "Export history (JSON)")),
    el("section", { class: "card", "aria-labelledby": "timeline-title" },
      el("div", { class: "section-head" }, el("h2", { id: "timeline-title" }, "Timeline"),
        el("p", { class: "legend" }, el("span", { class: "key completed" }), "step ", el("span", { class: "key failed" }), "failed attempt ",
          el("span", { class: "key wait" }), "wait ", el("span", { class: "key backoff" }), "retry backoff ", el("span", { class: "key running" }), "in progress")),
      el("ol", { id: "timeline", class: "gantt" })),
    el("section", { class: "card", "aria-labelledby": "steps-title" },
      el("h2", { id: "steps-title" }, "Steps"), el("ol", { id: "steps", class: "steps" })),
    el("section", { class: "card", "aria-labelledby": "data-title" },
      el("h2", { id: "data-title" }, "Input, output, error"), el("div", { id: "data" })),
    el("section", { class: "card", "aria-labelledby": "children-title" },
      el("h2", { id: "children-title" }, "Children"), el("ul", { id: "children", class: "tree" })));
  live.start(() => api(path), draw, 2);
}

function signalForm() {
  const form = el("details", { class: "popover", dataset: { key: "signal" } },
    el("summary", { class: "button" }, "Send signal…"),
    el("form", { id: "signal", class: "card stack" },
      el("label", { class: "field" }, el("span", {}, "signal name"), el("input", { id: "signal-name", required: true, size: 16 })),
      el("label", { class: "field" }, el("span", {}, "payload (JSON)"), el("textarea", { id: "signal-payload", rows: 3, placeholder: "null" })),
      el("button", { type: "submit", class: "primary" }, "Send")));
  form.querySelector("form").addEventListener("submit", sendSignal);
  return form;
}

async function sendSignal(event) {
  event.preventDefault();
  const name = $("#signal-name").value.trim();
  let payload;
  try {
    payload = JSON.parse($("#signal-payload").value.trim() || "null");
  } catch (err) {
    note("The payload is not JSON: " + err.message, "error");
    return;
  }
  if (!await confirmAction(`Send signal ${name}?`, `To ${runId}, with payload ${JSON.stringify(payload)}.`, "Send")) return;
  await perform(`signal ${name}`, () => post(`${path}/signal/${encodeURIComponent(name)}`, payload));
  event.target.closest("details").open = false;
}

async function act(action) {
  const current = JSON.parse(live.last || "{}");
  const [title, text] = action.confirm(current);
  if (!await confirmAction(title, text, action.label)) return;
  await perform(action.label.toLowerCase(), action.call);
}

async function perform(what, call) {
  try {
    await call();
    note(`${what}: done`);
  } catch (err) {
    note(`${what} failed: ${err.message}`, "error");
  }
  await live.refresh();
}

function exportHistory() {
  const blob = new Blob([live.last ? json(JSON.parse(live.last)) : "{}"], { type: "application/json" });
  const link = el("a", { href: URL.createObjectURL(blob), download: `run-${runId}.json` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function draw(run) {
  document.title = `${run.id} · runlane`;
  fill($("#status"), badge(run.status));
  const end = TERMINAL.includes(run.status) ? run.updated_at : null;
  fill($("#facts"), 
    fact("workflow", `${run.workflow}@${run.version}`), fact("created", when(run.created_at)),
    fact(end ? "took" : "running for", took(run.created_at, end)),
    run.parent_id ? fact("parent", runLink(run.parent_id)) : null,
    run.priority ? fact("priority", run.priority) : null,
    run.tags.length ? fact("tags", ...run.tags.map((tag) => el("a", { class: "tag", href: `/ui/runs?tag=${encodeURIComponent(tag)}` }, tag))) : null,
    Object.keys(run.attributes).length ? fact("attributes", ...Object.entries(run.attributes).map(([name, value]) => attributeLink(name, value))) : null);
  for (const action of ACTIONS) $("#" + action.name).disabled = !action.applies(run);
  drawWaiting(run.waiting_for);
  const span = spanOf(run);
  sync($("#timeline"), run.steps.map((step) => ({ step, span })), ({ step }) => step.seq, ({ step }) => gantt(step, span));
  sync($("#steps"), run.steps, (step) => `step-${step.seq}`, stepDetails);
  if (!run.steps.length) fill($("#steps"), emptyItem("No step recorded yet."));
  sync($("#data"), dataOf(run), (part) => part.key, (part) => part.node());
  sync($("#children"), run.children, (child) => child.id, childNode);
  if (!run.children.length) fill($("#children"), emptyItem("No children."));
}

function fact(label, ...value) {
  return el("span", { class: "fact" }, el("span", { class: "muted" }, label + " "), ...value);
}

// What it waits for, with a link to where that is seen.
function drawWaiting(waiting) {
  const box = $("#waiting");
  box.hidden = !waiting;
  if (!waiting) return fill(box);
  const links = {
    slot: () => el("a", { href: `/ui/lanes?key=${encodeURIComponent(waiting.lane)}` }, `lane ${waiting.lane}`),
    queue: () => el("a", { href: `/ui/lanes?key=${encodeURIComponent(waiting.queue)}` }, `step queue ${waiting.queue}`),
    child: () => waiting.child ? runLink(waiting.child) : null,
    worker: () => el("a", { href: "/ui/engines" }, "engines & workers"),
    remote_turn: () => el("a", { href: "/ui/engines" }, "engines & workers"),
    engine: () => el("a", { href: "/ui/engines" }, "engines & workers"),
  };
  const link = links[waiting.kind]?.();
  fill(box, el("h2", {}, "Waiting for"), el("p", { id: "waiting-reason" }, waiting.reason),
    waiting.until ? el("p", { class: "muted" }, "until ", when(waiting.until)) : null,
    link ? el("p", {}, "See ", link) : null);
  box.dataset.kind = waiting.kind;
}

// ------------------------------------------------------------------ the timeline

function spanOf(run) {
  const start = Date.parse(run.created_at);
  const ends = run.steps.flatMap((s) => [s.finished_at, s.wake_at, s.started_at]).filter(Boolean).map(Date.parse);
  const end = TERMINAL.includes(run.status) ? Date.parse(run.updated_at) : Date.now();
  return { start, end: Math.max(end, ...ends, start + 1) };
}

// A step's row: each failed attempt, the backoff after it, the latest attempt (or the wait).
function gantt(step, span) {
  const bars = [];
  const attempts = step.error?.attempts || [];
  attempts.forEach((a, i) => {
    bars.push(bar(a.started_at, a.finished_at, "failed", `attempt ${a.attempt} failed: ${a.type}: ${a.message}`, span));
    const next = attempts[i + 1]?.started_at || (step.status === "pending" ? step.wake_at : step.started_at);
    if (next && next !== a.started_at) bars.push(bar(a.finished_at, next, "backoff", `retry backoff until ${absolute(next)}`, span));
  });
  const last = attempts.at(-1);
  const repeated = last && last.started_at === step.started_at;
  if (!repeated && step.started_at) {
    const cls = WAITS.includes(step.kind) ? "wait" : step.finished_at ? step.status : "running";
    bars.push(bar(step.started_at, step.finished_at, cls, `${step.kind} ${step.name}: ${step.status}`, span));
  }
  const first = attempts[0]?.started_at || step.started_at;
  const spent = first ? took(first, step.finished_at) : "";
  return el("li", { class: "gantt-row" },
    el("span", { class: "gantt-label" }, el("span", { class: "seq" }, `#${step.seq}`), " ", el("span", { class: "mono" }, step.name),
      " ", el("span", { class: "muted" }, step.kind)),
    el("span", { class: "gantt-track", role: "img",
      "aria-label": `#${step.seq} ${step.name}: ${step.status}, ${step.attempts} attempt(s), ${spent}` }, ...bars),
    el("span", { class: "gantt-took num" }, spent));
}

function bar(from, to, cls, title, span) {
  const start = Date.parse(from);
  const end = to ? Date.parse(to) : Date.now();
  const width = span.end - span.start;
  const left = ((start - span.start) / width) * 100;
  const size = Math.max(0, Math.min(100 - left, ((end - start) / width) * 100));
  return el("span", { class: `gantt-bar ${cls}`, style: `left:${left}%;width:${size}%`, title: `${title} (${duration(end - start)})` });
}

// ------------------------------------------------------------------ steps and data

function stepDetails(step) {
  const attempts = step.error?.attempts || [];
  const first = attempts[0]?.started_at || step.started_at;
  return el("li", {}, el("details", { class: "step", dataset: { key: `step-${step.seq}` } },
    el("summary", {}, el("span", { class: "seq" }, `#${step.seq}`), " ", el("span", { class: "mono" }, step.name), " ",
      el("span", { class: "muted" }, step.kind), " ", badge(step.status),
      el("span", { class: "muted" }, ` · ${step.attempts} attempt${step.attempts === 1 ? "" : "s"}`),
      first ? el("span", { class: "muted" }, ` · took ${took(first, step.finished_at)}`) : null),
    el("div", { class: "step-body" },
      el("p", { class: "facts" }, fact("started", when(step.started_at)), fact("finished", when(step.finished_at)),
        step.wake_at ? fact(step.status === "pending" ? "wakes" : "woke", when(step.wake_at)) : null),
      folded("input", step.input, `in-${step.seq}`), folded("output", step.output, `out-${step.seq}`),
      step.error ? errorBlock(step.error) : null,
      attempts.length ? attemptTable(attempts) : null)));
}

function attemptTable(attempts) {
  return el("table", { class: "compact attempts" }, el("caption", {}, "Failed attempts"),
    el("thead", {}, el("tr", {}, ...["attempt", "began", "took", "error"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...attempts.map((a) => el("tr", {}, el("td", { class: "num" }, a.attempt), el("td", {}, when(a.started_at)),
      el("td", { class: "num" }, took(a.started_at, a.finished_at)), el("td", {}, `${a.type}: ${a.message}`)))));
}

function dataOf(run) {
  const parts = [
    { key: "input", value: run.input, node: () => folded("Input", run.input, "input", true) },
    { key: "output", value: run.output, node: () => folded("Output", run.output, "output") },
  ];
  if (run.error) parts.push({ key: "error", value: run.error, node: () => el("div", { id: "error" }, el("h3", {}, "Error"), errorBlock(run.error)) });
  return parts;
}

// A child, and (opened) its own children, fetched when opened.
function childNode(child) {
  const details = el("details", { dataset: { key: `child-${child.id}` } },
    el("summary", {}, runLink(child.id), " ", badge(child.status), " ", el("span", { class: "muted" }, `${child.workflow} · `), when(child.created_at)),
    el("ul", { class: "tree" }));
  details.addEventListener("toggle", async () => {
    if (!details.open || details.dataset.loaded) return;
    details.dataset.loaded = "1";
    const body = await api("/runs/" + encodeURIComponent(child.id));
    const list = details.querySelector("ul");
    fill(list, ...(body.children.length ? body.children.map(childNode) : [emptyItem("No children.")]));
  });
  return el("li", {}, details);
}

