// Small SVG charts drawn from numbers the API gave: stacked bars per minute, and a lane's usage
// and waiters over time. Each is an image with a text description for screen readers.
import { svg } from "./core.js";

const W = 600;

// Stacked bars: one per point, the stacks' values on top of each other.
export function bars(points, stacks, { label, height = 80 } = {}) {
  const most = Math.max(1, ...points.map((p) => stacks.reduce((sum, s) => sum + (p[s.key] || 0), 0)));
  const width = W / Math.max(1, points.length);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${height}`, class: "chart", role: "img",
    "aria-label": label, preserveAspectRatio: "none" });
  points.forEach((point, i) => {
    let top = height;
    for (const stack of stacks) {
      const value = point[stack.key] || 0;
      if (!value) continue;
      const h = (value / most) * (height - 2);
      top -= h;
      chart.append(svg("rect", { x: i * width + 0.5, y: top, width: Math.max(1, width - 1), height: h,
        class: stack.class }, svg("title", {}, `${point.label}: ${value} ${stack.key}`)));
    }
  });
  return chart;
}

// A lane over time: usage against its limit (filled), waiters (a line).
export function laneChart(points, limit, { label, height = 48 } = {}) {
  const most = Math.max(1, limit || 0, ...points.map(([, usage, waiting]) => Math.max(usage, waiting)));
  const span = Math.max(1, points.length - 1);
  const x = (i) => (i / span) * W;
  const y = (v) => height - 1 - (v / most) * (height - 4);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${height}`, class: "chart lane-chart", role: "img",
    "aria-label": label, preserveAspectRatio: "none" });
  if (limit) chart.append(svg("line", { x1: 0, x2: W, y1: y(limit), y2: y(limit), class: "limit" }));
  if (points.length) {
    const usage = points.map(([, u], i) => `${x(i)},${y(u)}`).join(" ");
    chart.append(svg("polygon", { points: `0,${height} ${usage} ${x(points.length - 1)},${height}`, class: "usage" }));
    chart.append(svg("polyline", { points: points.map(([, , w], i) => `${x(i)},${y(w)}`).join(" "), class: "waiting" }));
  }
  return chart;
}
