// The schedules: when each fires next (the next few windows), its last run and last error,
// and pause, resume and trigger, each confirmed.
import {
  $, allowed, api, confirmAction, el, empty, errorBlock, fill, live, note, post, readOnlyNote, runLink,
  shell, sync, when,
} from "../core.js";

export default function schedules() {
  shell("schedules", "Schedules");
  $("#page").append(
    el("div", { class: "page-head" }, el("h1", {}, "Schedules"), el("p", { id: "summary", class: "muted" }, "loading…"), readOnlyNote()),
    el("div", { id: "schedules", class: "cards" }));
  live.start(() => api("/schedules"), draw, 3);
}

function draw(body) {
  sync($("#schedules"), body.schedules, (s) => s.id, card);
  if (!body.schedules.length) fill($("#schedules"), empty("No schedule is stored."));
  const paused = body.schedules.filter((s) => s.paused).length;
  $("#summary").textContent = `${body.schedules.length} schedules · ${paused} paused`;
}

function timing(schedule) {
  if (schedule.cron) return `cron ${schedule.cron}` + (schedule.timezone && schedule.timezone !== "UTC" ? ` (${schedule.timezone})` : "");
  return `every ${schedule.every} s`;
}

function card(schedule) {
  const id = encodeURIComponent(schedule.id);
  const action = (name, label, text, cls = "") => el("button", { type: "button", class: cls, "data-action": name, disabled: !allowed(),
    onclick: async () => {
      if (!await confirmAction(`${label} ${schedule.id}?`, text, label)) return;
      try {
        const answer = await post(`/schedules/${id}/${name}`);
        note(name === "trigger" ? `started ${answer.id}` : `${schedule.id}: ${name}d`);
      } catch (err) {
        note(`${name} failed: ${err.message}`, "error");
      }
      await live.refresh();
    } }, label);
  return el("section", { class: "card schedule", dataset: { schedule: schedule.id } },
    el("h2", {}, el("span", { class: "mono" }, schedule.id), " ",
      schedule.paused ? el("span", { class: "status status-cancelled" }, "paused") : el("span", { class: "status status-running" }, "active")),
    el("p", { class: "facts" }, el("span", { class: "fact" }, el("span", { class: "muted" }, "runs "), schedule.workflow),
      el("span", { class: "fact" }, timing(schedule)), schedule.jitter ? el("span", { class: "fact" }, `jitter ${schedule.jitter} s`) : null,
      el("span", { class: "fact" }, `overlap ${schedule.overlap}`), el("span", { class: "fact" }, `catch-up ${schedule.catchup}`)),
    el("h3", {}, "Next fires"),
    schedule.paused ? empty("none while paused")
      : el("ol", { class: "fires" }, ...(schedule.next_fires || []).map((at) => el("li", {}, when(at)))),
    el("p", { class: "facts" }, el("span", { class: "fact" }, el("span", { class: "muted" }, "last fired "), when(schedule.last_fire_at)),
      el("span", { class: "fact" }, el("span", { class: "muted" }, "last run "), schedule.last_run_id ? runLink(schedule.last_run_id) : "—"),
      el("a", { href: `/ui/runs?tag=${encodeURIComponent("schedule:" + schedule.id)}` }, "its runs")),
    schedule.last_error ? el("div", {}, el("h3", {}, "Last error"), errorBlock(schedule.last_error)) : null,
    el("div", { class: "row" },
      schedule.paused ? action("resume", "Resume", "It fires again from its first window after now.")
        : action("pause", "Pause", "Windows that pass while it is paused never fire.", "danger"),
      action("trigger", "Trigger now", "One run of its workflow starts now, besides its windows.")));
}
