// prl dashboard: the overview (key curves first, then every other metric) with other runs
// overlaid, eval results per source, and the metrics view; charts from charts.js.
"use strict";

// The curves a user looks at first, in this order; each pattern may match several keys.
const KEY_METRICS = [/^reward\/all\/mean$/, /^eval\/[^/]+\/avg@\d+$/, /^val\/loss$/, /^loss\/(all|mean)$/,
  /^entropy\/all\/mean$/, /^mismatch_kl\/all\/mean$/, /^loss\/ref_kl$/, /^(kl|ref_kl)\/all\/mean$/,
  /^perf\/throughput$/, /^time\/step$/];
const NOT_METRICS = ["step", "time", "producer", "attempt"];
const metricStore = new Map(); // run id -> {offset, step: {key: {producer: Map}}, time: {...}, t0}

function addRows(state, rows) {
  for (const row of rows) {
    const producer = row.producer || "?";
    const byStep = Number.isInteger(row.step);
    if (!byStep && typeof row.time !== "number") continue;
    if (typeof row.time === "number") state.t0 = Math.min(state.t0 ?? row.time, row.time);
    const table = byStep ? state.step : state.time;
    for (const [key, value] of Object.entries(row)) {
      if (NOT_METRICS.includes(key) || typeof value !== "number") continue;
      const byProducer = (table[key] ||= {});
      (byProducer[producer] ||= new Map()).set(byStep ? row.step : row.time, value); // a newer attempt's row wins
    }
  }
}
// New rows of `run` since the last poll; true when anything changed.
async function pollMetrics(run) {
  let state = metricStore.get(run);
  if (!state) metricStore.set(run, (state = { offset: 0, step: {}, time: {}, t0: null }));
  const res = await api(runPath(run, "metrics?offset=" + state.offset));
  if (res.reset) Object.assign(state, { step: {}, time: {}, t0: null });
  addRows(state, res.rows);
  state.offset = res.offset;
  return res.rows.length > 0 || res.reset;
}
const keysOf = (runs) => [...new Set(runs.flatMap((r) => { const s = metricStore.get(r); return s ? [...Object.keys(s.step), ...Object.keys(s.time)] : []; }))];

// The series of `key` across `runs` (colour per run, dash per producer). Step-keyed rows
// when any run has them for this key, else time-keyed rows in seconds since each run began.
function seriesOf(key, runs) {
  const byStep = runs.some((r) => metricStore.get(r)?.step[key]);
  const out = [];
  runs.forEach((run, i) => {
    const state = metricStore.get(run);
    const producers = Object.entries((byStep ? state?.step : state?.time)?.[key] || {});
    producers.forEach(([producer, points], j) => {
      const shift = byStep ? 0 : state.t0 || 0;
      out.push({
        label: runs.length > 1 || producers.length > 1 ? run + (producers.length > 1 ? ` · ${producer}` : "") : producer,
        color: RUN_COLORS[i % RUN_COLORS.length], dash: DASHES[j % DASHES.length],
        points: [...points.entries()].map(([x, y]) => [x - shift, y]).sort((a, b) => a[0] - b[0]),
      });
    });
  });
  return { series: out, xLabel: byStep ? "step" : "seconds" };
}

function metricPane(key, runs) {
  const { series, xLabel } = seriesOf(key, runs);
  const lasts = series.map((s) => el("span", { style: `color:${s.color}` }, fmt(s.points.at(-1)?.[1])));
  const holder = el("div", { class: "chart-box" });
  // Several producers of one key (time/step of orchestrator and trainer): name each line.
  const named = series.some((s) => s.dash) ? el("div", { class: "pane-legend" }, series.map((s) =>
    el("span", {}, el("i", { class: "dash", style: `border-top: 2px ${s.dash ? "dashed" : "solid"} ${s.color}` }), " ", s.label))) : "";
  const node = el("div", { class: "pane", "data-key": key, "data-series": series.length,
    "data-points": series.reduce((n, s) => n + s.points.length, 0) },
  el("h4", {}, el("span", { class: "key" }, key), el("span", { class: "last" }, lasts)), named, holder);
  node.drawChart = () => holder.replaceChildren(lineChart(series, { width: Math.max(240, holder.clientWidth), xLabel }));
  return node;
}
// Panes are drawn once they are in the page, at the width the grid gave them.
function drawCharts(root) { for (const p of root.querySelectorAll(".pane")) p.drawChart?.(); }
let resizeTimer = null;
window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => drawCharts(document), 150); });

function keyOrder(keys) {
  const first = [];
  for (const re of KEY_METRICS) first.push(...keys.filter((k) => re.test(k) && !first.includes(k)).sort());
  return { first, rest: keys.filter((k) => !first.includes(k)).sort() };
}
function sections(keys, runs) {
  const groups = {};
  for (const k of keys) (groups[k.includes("/") ? k.split("/")[0] : "other"] ||= []).push(k);
  return Object.keys(groups).sort().map((g) => el("details", { class: "section", open: "" },
    el("summary", {}, `${g} (${groups[g].length})`), el("div", { class: "grid" }, groups[g].map((k) => metricPane(k, runs)))));
}

const statusBadge = (r) => el("span", { class: "status st-" + (r?.status || "unknown"), title: r?.status_reason || "" }, r?.status || "unknown");

function legend(runs, info) {
  return el("div", { class: "legend-runs", id: "run-legend" }, runs.map((run, i) => el("span", { class: "legend-run", "data-run": run },
    el("i", { class: "swatch", style: `background:${RUN_COLORS[i % RUN_COLORS.length]}` }), el("b", {}, run),
    el("span", { class: "muted" }, ` ${info[run]?.entry || "run"} · step ${fmt(info[run]?.last_step)}${info[run]?.max_steps ? "/" + info[run].max_steps : ""} `),
    statusBadge(info[run]), el("span", { class: "muted reason" }, info[run]?.status_reason || ""))));
}

// Checkboxes for every other run; ticking one adds it to the page's ?with= list.
function overlayPicker(run, others, all) {
  const chosen = new Set(others);
  const boxes = all.filter((r) => r.id !== run).map((r) => {
    const box = el("input", { type: "checkbox", value: r.id, ...(chosen.has(r.id) ? { checked: "" } : {}) });
    box.addEventListener("change", () => {
      box.checked ? chosen.add(r.id) : chosen.delete(r.id);
      const q = chosen.size ? "?with=" + [...chosen].map(encodeURIComponent).join(",") : "";
      location.hash = `#/run/${encodeURIComponent(run)}/overview${q}`;
    });
    return el("label", { class: "pick" }, box, ` ${r.id} `, el("span", { class: "muted" }, r.entry || ""), " ", statusBadge(r));
  });
  return el("details", { class: "overlay-pick", id: "overlay-pick", ...(others.length ? {} : {}) },
    el("summary", {}, `Overlay runs (${others.length} selected)`),
    boxes.length ? el("div", { class: "picks" }, boxes) : el("p", { class: "muted" }, "No other runs under the output directories."));
}

// Eval results: a bar per run and source with ± standard error, and the same as a table.
async function evalResults(runs) {
  const all = await Promise.all(runs.map((r) => api(runPath(r, "results")).catch(() => [])));
  if (!all.some((rows) => rows.length)) return null;
  const sources = [...new Set(all.flatMap((rows) => rows.map((x) => x.source)))].sort();
  const groups = sources.map((source) => ({ name: source, bars: runs.flatMap((run, i) => {
    const x = all[i].find((y) => y.source === source);
    return x ? [{ label: run, color: RUN_COLORS[i % RUN_COLORS.length], value: x.mean, err: x.stderr || 0 }] : [];
  }) }));
  const rows = sources.flatMap((source) => runs.map((run, i) => [run, i, all[i].find((y) => y.source === source)]).filter((t) => t[2])
    .map(([run, i, x]) => el("tr", { class: "result" }, el("td", {}, source), el("td", {}, el("i", { class: "swatch", style: `background:${RUN_COLORS[i % RUN_COLORS.length]}` }), " ", run),
      el("td", {}, x.n), el("td", { class: "num" }, `${fmt(x.mean)} ± ${x.stderr === null ? "–" : fmt(x.stderr)}`), el("td", {}, x.errors),
      el("td", { class: "muted" }, Object.entries(x.summary || {}).filter(([k]) => /(avg|pass)@\d+$/.test(k)).map(([k, v]) => `${k.split("/").pop()} ${fmt(v)}`).join(" · ")))));
  const holder = el("div", { class: "chart-box" });
  const node = el("div", { class: "pane wide", id: "eval-results" }, el("h4", {}, el("span", {}, "Eval reward per source (mean ± standard error over rollouts)")), holder,
    el("table", {}, el("thead", {}, el("tr", {}, ["source", "run", "rollouts", "reward mean ± stderr", "errors", "summary"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
  node.drawChart = () => holder.replaceChildren(barChart(groups, { width: Math.max(320, holder.clientWidth) }));
  return node;
}

async function showOverview(main, run, arg, query) {
  const others = (query.get("with") || "").split(",").filter(Boolean).map(decodeURIComponent).filter((r) => r !== run);
  const runs = [run, ...others];
  const list = await api("runs");
  const info = Object.fromEntries(list.map((r) => [r.id, r]));
  if (!info[run]) throw new Error(`run ${run} not found`);
  const missing = others.filter((r) => !info[r]);
  const shown = runs.filter((r) => info[r]);
  const head = el("div", { class: "toolbar" }, legend(shown, info), overlayPicker(run, others, list));
  const body = el("div", { id: "overview" });
  main.append(head, missing.length ? el("p", { class: "error" }, `Not found, left out: ${missing.join(", ")}`) : "", body);
  const draw = async () => {
    const { first, rest } = keyOrder(keysOf(shown));
    const results = await evalResults(shown);
    const key = el("div", { class: "grid key", id: "key-metrics" }, first.map((k) => metricPane(k, shown)));
    body.replaceChildren(...(results ? [el("h3", { class: "section" }, "Eval results"), results] : []),
      ...(first.length ? [el("h3", { class: "section" }, "Key metrics"), key] : []),
      ...(rest.length ? [el("h3", { class: "section" }, "All other metrics"), ...sections(rest, shown)] : []),
      ...(first.length || rest.length || results ? [] : [el("p", { class: "muted" }, "No metrics yet.")]));
    drawCharts(body);
    status(`${shown.length} run(s) · ${first.length + rest.length} metrics · updated ${new Date().toLocaleTimeString()}`);
  };
  for (const r of shown) metricStore.delete(r);
  await Promise.all(shown.map(pollMetrics));
  await draw();
  timer = setInterval(async () => {
    const changed = (await Promise.all(shown.map(pollMetrics))).some(Boolean);
    const fresh = Object.fromEntries((await api("runs")).map((r) => [r.id, r]));
    $("#run-legend")?.replaceWith(legend(shown, fresh));
    if (changed) await draw();
  }, POLL_MS);
}

async function showMetrics(main, run) {
  const filter = el("input", { type: "text", id: "metric-filter", placeholder: "regex filter, e.g. ^loss/", size: 40 });
  const count = el("span", { class: "muted" });
  const body = el("div", { id: "metrics" });
  main.append(el("div", { class: "toolbar" }, filter, count), body);
  const draw = () => {
    let re; try { re = new RegExp(filter.value || "."); filter.style.borderColor = ""; } catch { filter.style.borderColor = "red"; return; }
    const all = keysOf([run]), keys = all.filter((k) => re.test(k)).sort();
    count.textContent = `${keys.length} of ${all.length} metrics`;
    body.replaceChildren(el("div", { class: "grid" }, keys.map((k) => metricPane(k, [run]))));
    drawCharts(body);
  };
  filter.addEventListener("input", draw);
  metricStore.delete(run); await pollMetrics(run); draw();
  timer = setInterval(async () => { if (await pollMetrics(run)) draw(); }, POLL_MS);
}
