// prl dashboard: SVG charts with axes, tick values, a legend's colours and a hover readout.
// Drawn at the pixel width of their pane (redrawn on resize) so text is never stretched.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const RUN_COLORS = ["#3b63d9", "#e0662f", "#2a9d5c", "#9b3bd9", "#c9a227", "#1fa5c4", "#d93b7a", "#6b7385"];
const DASHES = ["", "5 3", "2 2", "8 3 2 3"]; // second, third... producer of one key in one run

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

// About `count` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten).
function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / count, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw * (1 - 1e-9)); // 0.8/4 is 0.2000...2
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}
const tickText = (v) => {
  const a = Math.abs(v);
  if (a === 0) return "0";
  if (a >= 1e6 || a < 1e-3) return v.toExponential(1);
  if (a >= 1e3) return (v / 1e3).toPrecision(3).replace(/\.?0+$/, "") + "k";
  return String(+v.toPrecision(3));
};

function extent(values, pad) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi) { const d = Math.abs(lo) * 0.1 || 1; lo -= d; hi += d; }
  else if (pad) { const d = (hi - lo) * pad; lo -= d; hi += d; }
  return [lo, hi];
}

// A line chart of `series` ([{label, color, dash, points: [[x, y], ...] sorted by x}]).
// One point alone is drawn as a marked dot with its value written beside it.
function lineChart(series, { width = 360, height = 200, xLabel = "step" } = {}) {
  const L = 52, R = 12, T = 10, B = 32;
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "chart" });
  const pts = series.flatMap((s) => s.points);
  if (!pts.length) { svg.append(svgEl("text", { x: width / 2, y: height / 2, "text-anchor": "middle" }, "no data")); return svg; }
  const [x0, x1] = extent(pts.map((p) => p[0]), 0);
  const [y0, y1] = extent(pts.map((p) => p[1]), 0.05);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (width - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (height - T - B);
  for (const v of niceTicks(y0, y1, 4)) {
    svg.append(svgEl("line", { x1: L, x2: width - R, y1: sy(v), y2: sy(v), class: "grid" }));
    svg.append(svgEl("text", { x: L - 6, y: sy(v) + 3, "text-anchor": "end", class: "tick" }, tickText(v)));
  }
  const xt = niceTicks(x0, x1, Math.max(2, Math.floor((width - L - R) / 70))).filter((v) => xLabel !== "step" || Number.isInteger(v));
  for (const v of xt) {
    svg.append(svgEl("line", { x1: sx(v), x2: sx(v), y1: height - B, y2: height - B + 4, class: "axis" }));
    svg.append(svgEl("text", { x: sx(v), y: height - B + 15, "text-anchor": "middle", class: "tick" }, tickText(v)));
  }
  svg.append(svgEl("line", { x1: L, x2: width - R, y1: height - B, y2: height - B, class: "axis" }));
  svg.append(svgEl("line", { x1: L, x2: L, y1: T, y2: height - B, class: "axis" }));
  svg.append(svgEl("text", { x: width - R, y: height - 3, "text-anchor": "end", class: "axis-label" }, xLabel));
  for (const s of series) {
    const path = s.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ");
    svg.append(svgEl("polyline", { points: path, fill: "none", stroke: s.color, "stroke-width": 2, "stroke-dasharray": s.dash || "", "data-series": s.label }));
    if (s.points.length <= 40) for (const [x, y] of s.points) svg.append(svgEl("circle", { cx: sx(x), cy: sy(y), r: s.points.length === 1 ? 4 : 2.5, fill: s.color }));
    if (s.points.length === 1) {
      const [x, y] = s.points[0];
      const right = sx(x) < width / 2;
      svg.append(svgEl("text", { x: sx(x) + (right ? 8 : -8), y: sy(y) - 6, "text-anchor": right ? "start" : "end", class: "point-label", fill: s.color }, `${fmt(y)} at ${xLabel} ${fmt(x)}`));
    }
  }
  hover(svg, series, { sx, L, R, T, B, width, height, x0, x1, xLabel });
  return svg;
}

// A vertical rule at the x nearest the pointer and a tip with every series' value there.
function hover(svg, series, g) {
  const rule = svgEl("line", { y1: g.T, y2: g.height - g.B, class: "rule", visibility: "hidden" });
  const area = svgEl("rect", { x: g.L, y: g.T, width: g.width - g.L - g.R, height: g.height - g.T - g.B, fill: "transparent" });
  svg.append(rule, area);
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  area.addEventListener("mousemove", (ev) => {
    const box = svg.getBoundingClientRect();
    const want = g.x0 + ((ev.clientX - box.left - g.L) / (g.width - g.L - g.R)) * (g.x1 - g.x0);
    const x = xs.reduce((best, v) => (Math.abs(v - want) < Math.abs(best - want) ? v : best), xs[0]);
    rule.setAttribute("x1", g.sx(x)); rule.setAttribute("x2", g.sx(x)); rule.setAttribute("visibility", "visible");
    const lines = series.map((s) => { const p = s.points.find((q) => q[0] === x); return p ? `${s.label}: ${fmt(p[1])}` : null; }).filter(Boolean);
    showTip(ev, [`${g.xLabel} ${fmt(x)}`, ...lines].join("\n"));
  });
  area.addEventListener("mouseleave", () => { rule.setAttribute("visibility", "hidden"); hideTip(); });
}

let tipNode = null;
function showTip(ev, text) {
  if (!tipNode) { tipNode = el("div", { class: "tip", id: "chart-tip" }); document.body.append(tipNode); }
  tipNode.hidden = false; tipNode.textContent = text;
  tipNode.style.left = ev.clientX + 14 + "px"; tipNode.style.top = ev.clientY + 14 + "px";
}
function hideTip() { if (tipNode) tipNode.hidden = true; }

// Grouped bars with ± error bars: one group per category, one bar per run in the group.
// `groups`: [{name, bars: [{label, color, value, err}]}].
function barChart(groups, { width = 480, height = 220 } = {}) {
  const L = 52, R = 12, T = 18, B = 34;
  const svg = svgEl("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "chart bars" });
  const tops = groups.flatMap((g) => g.bars.map((b) => b.value + (b.err || 0)));
  const lows = groups.flatMap((g) => g.bars.map((b) => b.value - (b.err || 0)));
  const [y0, y1] = [Math.min(0, ...lows), Math.max(...tops, 1e-9) * 1.08];
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (height - T - B);
  for (const v of niceTicks(y0, y1, 4)) {
    svg.append(svgEl("line", { x1: L, x2: width - R, y1: sy(v), y2: sy(v), class: "grid" }));
    svg.append(svgEl("text", { x: L - 6, y: sy(v) + 3, "text-anchor": "end", class: "tick" }, tickText(v)));
  }
  const gw = (width - L - R) / Math.max(1, groups.length);
  groups.forEach((g, gi) => {
    const bw = Math.min(48, (gw * 0.8) / g.bars.length);
    const start = L + gi * gw + (gw - bw * g.bars.length) / 2;
    g.bars.forEach((b, bi) => {
      const x = start + bi * bw, top = sy(Math.max(b.value, 0)), base = sy(Math.min(b.value, 0));
      svg.append(svgEl("rect", { x: x + 2, y: top, width: bw - 4, height: Math.max(1, base - top), fill: b.color, class: "bar", "data-label": b.label, "data-value": b.value }));
      if (b.err) {
        const cx = x + bw / 2, hi = sy(b.value + b.err), lo = sy(b.value - b.err);
        svg.append(svgEl("line", { x1: cx, x2: cx, y1: hi, y2: lo, class: "errbar" }));
        svg.append(svgEl("line", { x1: cx - 5, x2: cx + 5, y1: hi, y2: hi, class: "errbar" }));
        svg.append(svgEl("line", { x1: cx - 5, x2: cx + 5, y1: lo, y2: lo, class: "errbar" }));
      }
      svg.append(svgEl("text", { x: x + bw / 2, y: sy(b.value + (b.err || 0)) - 4, "text-anchor": "middle", class: "point-label" }, fmt(b.value)));
    });
    svg.append(svgEl("text", { x: L + gi * gw + gw / 2, y: height - B + 16, "text-anchor": "middle", class: "tick" }, g.name));
  });
  svg.append(svgEl("line", { x1: L, x2: width - R, y1: sy(0), y2: sy(0), class: "axis" }));
  return svg;
}
