// prl dashboard: a hash-routed single-page app over the JSON API (docs/dashboard.md).
// Hand-written, no dependencies. Routes: #/ (runs) and #/run/<id>/<view>[/<arg>].
"use strict";

const VIEWS = ["overview", "metrics", "config", "traces", "logs", "report"];
const POLL_MS = 5000;
const OVERVIEW = [/^reward\/all\/mean$/, /^loss\/(all|mean)$/, /^entropy\/all\/mean$/, /^mismatch_kl\/all\/mean$/,
  /^seq_len\/all\/mean$/, /^optim\/grad_norm$/, /^is_masked\/mean$/, /^val\/loss$/, /^eval\/.*\/reward\/mean$/,
  /^perf\/throughput$/, /^time\/step$/];
const COLORS = ["#3b63d9", "#d9643b", "#2a9d5c", "#9b3bd9", "#c9a227", "#3bb8d9"];
const OVERLAY_KIND = { advantages: "signed", mismatch_kl: "pos", entropy: "pos", prob_delta: "signed",
  trainer_logprobs: "logp", sampler_logprobs: "logp", inference_logprobs: "logp", importance_ratio: "ratio" };

let timer = null;
let metricState = null; // {run, offset, series: {key: {producer: Map(x -> y)}}}

const $ = (sel, root = document) => root.querySelector(sel);
function el(tag, attrs = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) node.append(kid instanceof Node ? kid : String(kid));
  return node;
}
async function api(path) {
  const res = await fetch("/api/" + path);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}
const runPath = (run, sub) => "runs/" + encodeURIComponent(run) + (sub ? "/" + sub : "");
const fmt = (v) => (v === null || v === undefined ? "–" : typeof v === "number" ? (Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : +v.toFixed(4)) : String(v));
function status(text) { $("#status").textContent = text; }

// ---- routing --------------------------------------------------------------------------------
function route() {
  clearInterval(timer); timer = null;
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const main = $("#main"); main.replaceChildren();
  if (parts[0] !== "run" || !parts[1]) { $("#crumb").textContent = ""; $("#tabs").replaceChildren(); return showRuns(main); }
  const run = decodeURIComponent(parts[1]);
  const view = VIEWS.includes(parts[2]) ? parts[2] : "overview";
  const arg = parts.slice(3).map(decodeURIComponent).join("/");
  $("#crumb").textContent = run;
  $("#tabs").replaceChildren(...VIEWS.map((v) => el("a", { href: `#/run/${encodeURIComponent(run)}/${v}`, class: v === view ? "on" : "", id: "tab-" + v }, v)));
  const show = { overview: showOverview, metrics: showMetrics, config: showConfig, traces: showTraces, logs: showLogs, report: showReport }[view];
  show(main, run, arg).catch((err) => main.replaceChildren(el("p", { class: "error" }, "Error: " + err.message)));
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// ---- runs -------------------------------------------------------------------------------------
async function showRuns(main) {
  const list = await api("runs");
  if (!list.length) { main.append(el("p", { class: "muted" }, "No runs found under the output directories.")); return; }
  const rows = list.map((r) => el("tr", { class: "click run", on: { click: () => (location.hash = `#/run/${encodeURIComponent(r.id)}/overview`) } },
    el("td", {}, r.id), el("td", {}, r.entry || "–"), el("td", {}, fmt(r.last_step)), el("td", {}, r.attempts.join(", ") || "–"),
    el("td", {}, r.live ? "live" : r.updated ? new Date(r.updated * 1000).toLocaleString() : "–"), el("td", { class: "muted" }, r.root)));
  main.append(el("table", { id: "runs" }, el("thead", {}, el("tr", {}, ["run", "entry", "last step", "attempts", "updated", "output dir"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
  status(`${list.length} run(s)`);
}

// ---- metrics (overview + metrics views) ---------------------------------------------------------
function addRows(state, rows) {
  for (const row of rows) {
    const producer = row.producer || "?";
    const x = row.step === null || row.step === undefined ? row.time : row.step;
    for (const [key, value] of Object.entries(row)) {
      if (["step", "time", "producer", "attempt"].includes(key) || typeof value !== "number") continue;
      const byProducer = (state.series[key] ||= {});
      (byProducer[producer] ||= new Map()).set(x, value); // a later row (newer attempt) wins
    }
  }
}
async function pollMetrics(run) {
  if (!metricState || metricState.run !== run) metricState = { run, offset: 0, series: {} };
  const res = await api(runPath(run, "metrics?offset=" + metricState.offset));
  if (res.reset) metricState.series = {};
  addRows(metricState, res.rows);
  metricState.offset = res.offset;
  status(`metrics: ${Object.keys(metricState.series).length} keys · updated ${new Date().toLocaleTimeString()}`);
  return res.rows.length > 0 || res.reset;
}
function chart(byProducer) {
  const ns = "http://www.w3.org/2000/svg", W = 340, H = 160, L = 46, B = 18;
  const lines = Object.entries(byProducer).map(([p, m]) => [p, [...m.entries()].sort((a, b) => a[0] - b[0])]);
  const pts = lines.flatMap(([, l]) => l);
  const svg = document.createElementNS(ns, "svg"); svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  if (!pts.length) return svg;
  let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
  if (x0 === x1) { x0 -= 1; x1 += 1; } if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - 6), sy = (y) => 6 + (1 - (y - y0) / (y1 - y0)) * (H - B - 6);
  const add = (tag, attrs, text) => { const n = document.createElementNS(ns, tag); for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v); if (text !== undefined) n.textContent = text; svg.append(n); return n; };
  add("line", { x1: L, y1: H - B, x2: W - 6, y2: H - B, stroke: "#dde1ea" });
  add("text", { x: L - 4, y: 12, "text-anchor": "end" }, fmt(y1));
  add("text", { x: L - 4, y: H - B, "text-anchor": "end" }, fmt(y0));
  add("text", { x: L, y: H - 4 }, fmt(x0));
  add("text", { x: W - 6, y: H - 4, "text-anchor": "end" }, fmt(x1));
  lines.forEach(([producer, l], i) => {
    const color = COLORS[i % COLORS.length];
    add("polyline", { fill: "none", stroke: color, "stroke-width": 1.5, points: l.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" ") });
    for (const [x, y] of l.length <= 60 ? l : []) add("circle", { cx: sx(x), cy: sy(y), r: 2, fill: color }).append(Object.assign(document.createElementNS(ns, "title"), { textContent: `${producer} ${fmt(x)}: ${fmt(y)}` }));
  });
  return svg;
}
function pane(key) {
  const byProducer = metricState.series[key] || {};
  const count = Object.values(byProducer).reduce((n, m) => n + m.size, 0);
  const last = Object.values(byProducer).map((m) => [...m.entries()].sort((a, b) => a[0] - b[0]).pop()).filter(Boolean).pop();
  return el("div", { class: "pane", "data-key": key, "data-points": count },
    el("h4", {}, el("span", {}, key), el("span", { class: "last" }, last ? fmt(last[1]) : "")), chart(byProducer));
}
function sections(keys) {
  const groups = {};
  for (const k of keys) (groups[k.includes("/") ? k.split("/")[0] : "other"] ||= []).push(k);
  return Object.keys(groups).sort().flatMap((g) => [el("h3", { class: "section" }, g), el("div", { class: "grid" }, groups[g].sort().map(pane))]);
}
async function showOverview(main, run) {
  const info = await api(runPath(run));
  main.append(el("p", { class: "muted", id: "run-info" }, `${info.entry || "run"} · ${info.path} · last step ${fmt(info.last_step)} · attempts ${info.attempts.join(", ") || "–"}${info.live ? " · live" : ""}`));
  const body = el("div", { id: "overview" }); main.append(body);
  const draw = () => {
    const keys = Object.keys(metricState.series).filter((k) => OVERVIEW.some((re) => re.test(k)));
    body.replaceChildren(...(keys.length ? sections(keys) : [el("p", { class: "muted" }, "No metrics yet.")]));
  };
  metricState = null; await pollMetrics(run); draw();
  timer = setInterval(async () => { if (await pollMetrics(run)) draw(); }, POLL_MS);
}
async function showMetrics(main, run) {
  const filter = el("input", { type: "text", id: "metric-filter", placeholder: "regex filter, e.g. ^loss/", size: 40 });
  const count = el("span", { class: "muted" });
  const body = el("div", { id: "metrics" });
  main.append(el("div", { class: "toolbar" }, filter, count), body);
  const draw = () => {
    let re; try { re = new RegExp(filter.value || "."); filter.style.borderColor = ""; } catch { filter.style.borderColor = "red"; return; }
    const keys = Object.keys(metricState.series).filter((k) => re.test(k));
    count.textContent = `${keys.length} of ${Object.keys(metricState.series).length} metrics`;
    body.replaceChildren(...sections(keys));
  };
  filter.addEventListener("input", draw);
  metricState = null; await pollMetrics(run); draw();
  timer = setInterval(async () => { if (await pollMetrics(run)) draw(); }, POLL_MS);
}

// ---- config -----------------------------------------------------------------------------------
async function showConfig(main, run, arg) {
  const names = await api(runPath(run, "configs"));
  if (!names.length) { main.append(el("p", { class: "muted" }, "No configs in configs/latest.")); return; }
  const main_ = ["rl", "trainer", "sft", "eval", "orchestrator"].map((e) => `resolved/${e}.json`).find((n) => names.includes(n));
  const name = names.includes(arg) ? arg : main_ || names[0];
  const doc = await api(runPath(run, "config?name=" + encodeURIComponent(name)));
  const list = el("div", { class: "list" }, names.map((n) => el("a", { href: `#/run/${encodeURIComponent(run)}/config/${encodeURIComponent(n)}`, class: n === name ? "on" : "" }, n)));
  const text = doc.json ? JSON.stringify(doc.json, null, 2) : doc.text;
  main.append(el("div", { class: "split" }, list, el("pre", { id: "config-text" }, text)));
}

// ---- logs -------------------------------------------------------------------------------------
async function showLogs(main, run, arg) {
  const files = await api(runPath(run, "logfiles"));
  const pick = el("select", { id: "log-pick" }, el("option", { value: "" }, "all components (merged)"), files.map((f) => el("option", { value: f.name }, `${f.name} (${f.size} B)`)));
  pick.value = arg || "";
  pick.addEventListener("change", () => (location.hash = `#/run/${encodeURIComponent(run)}/logs/${encodeURIComponent(pick.value)}`));
  const out = el("pre", { class: "log", id: "log-text" });
  main.append(el("div", { class: "toolbar" }, pick), out);
  const load = async () => {
    const stick = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    if (arg) out.textContent = (await api(runPath(run, "log?name=" + encodeURIComponent(arg)))).text;
    else {
      const res = await api(runPath(run, "log"));
      out.replaceChildren(...res.lines.map((l) => [el("span", { class: "c" }, l.component.padEnd(13)), " ", l.line, "\n"]).flat());
      if (!res.lines.length) out.textContent = "No logs under logs/latest.";
    }
    if (stick) out.scrollTop = out.scrollHeight;
  };
  await load(); timer = setInterval(load, POLL_MS);
}

// ---- report -----------------------------------------------------------------------------------
async function showReport(main, run, arg) {
  const list = await api(runPath(run, "reports"));
  if (!list.length) { main.append(el("p", { class: "muted" }, "No reports: write Markdown files to <run>/reports/<slug>.md.")); return; }
  const name = list.some((r) => r.name === arg) ? arg : list[0].name;
  const doc = await api(runPath(run, "report?name=" + encodeURIComponent(name)));
  const nav = el("div", { class: "list" }, list.map((r) => el("a", { href: `#/run/${encodeURIComponent(run)}/report/${encodeURIComponent(r.name)}`, class: r.name === name ? "on" : "" }, r.title)));
  const body = el("article", { class: "report", id: "report" });
  body.innerHTML = doc.html; // rendered server-side with every character of the report escaped first
  main.append(el("div", { class: "split" }, nav, body));
}
