// One run: what it waits for, its steps on a timeline (attempts, retries, waits), each step's
// input, output and error, the run's own, its children, its history to download, and the
// actions an operator takes on it, each confirmed.
import {
  $, ACTIVE, TERMINAL, absolute, allowed, api, attributeLink, badge, confirmAction, duration, el,
  emptyItem, errorBlock, fill, folded, guardForm, json, live, note, post, readOnlyNote, runLink,
  shell, sync, took, when,
} from "../core.js";

const REQUEUEABLE = ["failed", "dead", "cancelled"];
const WAITS = ["sleep", "signal", "update", "event", "child", "start_child"];
let runId;
let path;

// The actions on a run: when each applies, how it is confirmed, what it calls. An action the
// engine gains is one more entry here.
const ACTIONS = [
  {
    name: "pause", label: "Pause",
    applies: (run) => ACTIVE.includes(run.status) && !["paused", "cancelling"].includes(run.status) && !run.pause_requested_at,
    confirm: (run) => [`Pause ${run.id}?`, "A step in flight finishes and is recorded; then the run takes no further turn until it is resumed. It keeps its singleton and quota places; timers, signals and updates that come meanwhile take effect on resume."],
    call: () => post(path + "/pause"),
  },
  {
    name: "resume", label: "Resume",
    applies: (run) => run.status === "paused" || Boolean(run.pause_requested_at && ACTIVE.includes(run.status)),
    confirm: (run) => [`Resume ${run.id}?`, run.status === "paused" ? "It is due now, and its next turn takes up what came while it was paused." : "The pause asked of its turn in flight is withdrawn."],
    call: () => post(path + "/resume"),
  },
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

// What an operator sends a run from a form (a name and a JSON payload): a signal, delivered or
// kept until the run waits for it; an update, answered by the workflow's reply.
const MESSAGES = [
  {
    kind: "signal", label: "Send signal…",
    also: "",
    send: (name, payload) => post(`${path}/signal/${encodeURIComponent(name)}`, payload),
    said: () => "done",
  },
  {
    kind: "update", label: "Send update…",
    also: " The page waits for the workflow's reply (up to 30 s).",
    send: (name, payload) => post(`${path}/updates/${encodeURIComponent(name)}`, { payload }),
    said: (answer) => "reply " + JSON.stringify(answer.reply),
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
      ...MESSAGES.map(messageForm).map(guardForm),
      guardForm(forkForm()),
      el("button", { type: "button", id: "export", class: "ghost", onclick: exportHistory }, "Export history (JSON)"),
      readOnlyNote()),
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

function messageForm(message) {
  const { kind } = message;
  const form = el("details", { class: "popover", dataset: { key: kind } },
    el("summary", { class: "button" }, message.label),
    el("form", { id: kind, class: "card stack" },
      el("label", { class: "field" }, el("span", {}, `${kind} name`), el("input", { id: `${kind}-name`, required: true, size: 16 })),
      el("label", { class: "field" }, el("span", {}, "payload (JSON)"), el("textarea", { id: `${kind}-payload`, rows: 3, placeholder: "null" })),
      el("button", { type: "submit", class: "primary" }, "Send")));
  form.querySelector("form").addEventListener("submit", (event) => sendMessage(event, message));
  return form;
}

// A fork: a new run reusing this one's recorded results before a sequence number (by default
// its first failed or unfinished operation); the page goes to the fork once it is made.
function forkForm() {
  const form = el("details", { class: "popover", dataset: { key: "fork" } },
    el("summary", { class: "button" }, "Fork…"),
    el("form", { id: "fork", class: "card stack" },
      el("label", { class: "field" }, el("span", {}, "from seq (empty: first failed or unfinished)"),
        el("input", { id: "fork-seq", type: "number", min: 1, step: 1, size: 6 })),
      el("label", { class: "field" }, el("span", {}, "fork id (empty: the next free one)"), el("input", { id: "fork-id", size: 16 })),
      el("button", { type: "submit", class: "primary" }, "Fork")));
  form.querySelector("form").addEventListener("submit", forkRun);
  return form;
}

async function forkRun(event) {
  event.preventDefault();
  const seq = $("#fork-seq").value.trim();
  const id = $("#fork-id").value.trim();
  const body = {};
  if (seq) body.from_seq = Number(seq);
  if (id) body.run_id = id;
  const from = seq ? `its operations before #${seq}` : "its operations before the first failed or unfinished one";
  if (!await confirmAction(`Fork ${runId}?`, `A new run reuses ${from}, never running them again, and goes on from there; ${runId} is untouched.`, "Fork")) return;
  try {
    const fork = await post(path + "/fork", body);
    event.target.closest("details").open = false;
    location.assign("/ui/runs/" + encodeURIComponent(fork.id));
  } catch (err) {
    note(`fork failed: ${err.message}`, "error");
  }
}

async function sendMessage(event, message) {
  event.preventDefault();
  const { kind } = message;
  const name = $(`#${kind}-name`).value.trim();
  let payload;
  try {
    payload = JSON.parse($(`#${kind}-payload`).value.trim() || "null");
  } catch (err) {
    note("The payload is not JSON: " + err.message, "error");
    return;
  }
  const text = `To ${runId}, with payload ${JSON.stringify(payload)}.${message.also}`;
  if (!await confirmAction(`Send ${kind} ${name}?`, text, "Send")) return;
  await perform(`${kind} ${name}`, () => message.send(name, payload), message.said);
  event.target.closest("details").open = false;
}

async function act(action) {
  const current = JSON.parse(live.last || "{}");
  const [title, text] = action.confirm(current);
  if (!await confirmAction(title, text, action.label)) return;
  await perform(action.label.toLowerCase(), action.call);
}

async function perform(what, call, said = () => "done") {
  try {
    note(`${what}: ${said(await call())}`);
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
    run.forked_from ? fact("forked from", runLink(run.forked_from[0]), ` at #${run.forked_from[1]}`) : null,
    run.deadline_at ? fact("deadline", when(run.deadline_at)) : null,
    run.pause_requested_at ? fact("pause asked", when(run.pause_requested_at)) : null,
    run.priority ? fact("priority", run.priority) : null,
    run.tags.length ? fact("tags", ...run.tags.map((tag) => el("a", { class: "tag", href: `/ui/runs?tag=${encodeURIComponent(tag)}` }, tag))) : null,
    Object.keys(run.attributes).length ? fact("attributes", ...Object.entries(run.attributes).map(([name, value]) => attributeLink(name, value))) : null);
  for (const action of ACTIONS) $("#" + action.name).disabled = !allowed(action.applies(run));
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

