// prl dashboard: a hash-routed single-page app over the JSON API (docs/dashboard.md).
// Hand-written, no dependencies. Routes: #/ (runs) and #/run/<id>/<view>[/<arg>].
"use strict";

const VIEWS = ["overview", "metrics", "config", "traces", "logs", "report"];
const POLL_MS = 5000;
const OVERLAY_KIND = { advantages: "signed", mismatch_kl: "pos", entropy: "pos", prob_delta: "signed",
  trainer_logprobs: "logp", sampler_logprobs: "logp", inference_logprobs: "logp", importance_ratio: "ratio" };

let timer = null;

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
  const [path, qs] = location.hash.replace(/^#\/?/, "").split("?");
  const parts = path.split("/"), query = new URLSearchParams(qs || "");
  const main = $("#main"); main.replaceChildren();
  if (parts[0] !== "run" || !parts[1]) { $("#crumb").textContent = ""; $("#tabs").replaceChildren(); return showRuns(main); }
  const run = decodeURIComponent(parts[1]);
  const view = VIEWS.includes(parts[2]) ? parts[2] : "overview";
  const arg = parts.slice(3).map(decodeURIComponent).join("/");
  $("#crumb").textContent = run;
  $("#tabs").replaceChildren(...VIEWS.map((v) => el("a", { href: `#/run/${encodeURIComponent(run)}/${v}`, class: v === view ? "on" : "", id: "tab-" + v }, v)));
  const show = { overview: showOverview, metrics: showMetrics, config: showConfig, traces: showTraces, logs: showLogs, report: showReport }[view];
  const loading = el("p", { class: "muted", id: "loading" }, "Loading…"); // a trace's first tokenizer load takes seconds
  main.append(loading);
  show(main, run, arg, query).catch((err) => main.replaceChildren(el("p", { class: "error" }, "Error: " + err.message))).finally(() => loading.remove());
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// ---- runs -------------------------------------------------------------------------------------
// One row per run with its status; ticking runs and "Overlay selected" opens the first
// one's overview with the others overlaid.
async function showRuns(main) {
  const list = await api("runs");
  if (!list.length) { main.append(el("p", { class: "muted" }, "No runs found under the output directories.")); return; }
  const picked = new Set();
  const go = el("button", { id: "overlay-go", disabled: "", on: { click: () => {
    const [first, ...rest] = [...picked];
    location.hash = `#/run/${encodeURIComponent(first)}/overview` + (rest.length ? "?with=" + rest.map(encodeURIComponent).join(",") : "");
  } } }, "Overlay selected");
  const rows = list.map((r) => {
    const box = el("input", { type: "checkbox", value: r.id, on: { click: (ev) => ev.stopPropagation(), change: (ev) => {
      ev.target.checked ? picked.add(r.id) : picked.delete(r.id);
      go.disabled = picked.size < 1; go.textContent = picked.size > 1 ? `Overlay ${picked.size} runs` : "Overlay selected";
    } } });
    const steps = fmt(r.last_step) + (r.max_steps ? ` / ${r.max_steps}` : "");
    return el("tr", { class: "click run", "data-run": r.id, on: { click: () => (location.hash = `#/run/${encodeURIComponent(r.id)}/overview`) } },
      el("td", {}, box), el("td", {}, r.id), el("td", {}, r.entry || "–"), el("td", {}, statusBadge(r)), el("td", {}, steps),
      el("td", {}, r.attempts.join(", ") || "–"), el("td", {}, r.updated ? new Date(r.updated * 1000).toLocaleString() : "–"),
      el("td", { class: "muted reason" }, r.status_reason || ""));
  });
  main.append(el("div", { class: "toolbar" }, go, el("span", { class: "muted" }, "tick runs to overlay them on the same charts")),
    el("table", { id: "runs" }, el("thead", {}, el("tr", {}, ["", "run", "entry", "status", "step", "attempts", "updated", "why"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
  status(`${list.length} run(s)`);
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
