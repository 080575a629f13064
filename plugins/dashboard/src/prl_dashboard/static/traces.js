// prl dashboard: the traces view — the episode table and the viewer with per-token overlays.
// Overlays come from the trace (sampler logprobs, advantages, weights, sampled mask) and the
// trainer's token export (trainer logprobs, entropy, mismatch KL, loss and IPO masks).
"use strict";

const PAGE = 50;

const LIVE_POLL_MS = 1000;

async function showTraces(main, run, arg) {
  if (arg.startsWith("live:")) return showLive(main, run, arg.slice(5));
  if (arg !== "") return showEpisode(main, run, Number(arg));
  const kind = el("select", { id: "ep-kind" }, ["", "train", "eval"].map((k) => el("option", { value: k }, k || "all kinds")));
  const env = el("select", { id: "ep-env" }, el("option", { value: "" }, "all envs"));
  const info = el("span", { class: "muted" });
  const table = el("table", { id: "episodes" });
  let offset = 0;
  const prev = el("button", { on: { click: () => { offset = Math.max(0, offset - PAGE); load(); } } }, "‹ newer");
  const next = el("button", { on: { click: () => { offset += PAGE; load(); } } }, "older ›");
  const liveTable = el("table", { id: "live", hidden: "" });
  main.append(el("div", { class: "toolbar" }, kind, env, prev, next, info), liveTable, table);
  const cols = ["line", "step", "kind", "env", "reward", "advantage", "tokens", "turns", "stop_condition", "ok"];
  async function load() {
    const q = `episodes?offset=${offset}&limit=${PAGE}&kind=${kind.value}&env=${encodeURIComponent(env.value)}`;
    const res = await api(runPath(run, q));
    if (env.options.length === 1) res.envs.forEach((e) => env.append(el("option", { value: e }, e)));
    info.textContent = `${res.total} episodes · ${offset + 1}–${Math.min(offset + PAGE, res.total)}`;
    table.replaceChildren(el("thead", {}, el("tr", {}, cols.map((c) => el("th", {}, c)))),
      el("tbody", {}, res.rows.map((r) => el("tr", { class: "click episode", on: { click: () => (location.hash = `#/run/${encodeURIComponent(run)}/traces/${r.line}`) } },
        cols.map((c) => el("td", {}, fmt(r[c])))))));
    if (!res.total) table.replaceChildren(el("caption", { class: "muted" }, "No episodes yet (the file monitor writes them to traces/stream.index.jsonl)."));
  }
  kind.addEventListener("change", () => { offset = 0; load(); });
  env.addEventListener("change", () => { offset = 0; load(); });
  const liveCols = ["status", "id", "kind", "env", "task_id", "version", "turns", "tokens", "elapsed"];
  let liveCount = 0;
  async function loadLive() { // in-flight episodes, above the finished ones
    const res = await api(runPath(run, "live"));
    const ended = res.rows.length < liveCount;
    liveCount = res.rows.length;
    liveTable.hidden = !liveCount;
    liveTable.replaceChildren(el("thead", {}, el("tr", {}, liveCols.map((c) => el("th", {}, c)))),
      el("tbody", {}, res.rows.map((r) => el("tr", { class: "click live-row " + r.status, on: { click: () => (location.hash = `#/run/${encodeURIComponent(run)}/traces/live:${r.id}`) } },
        liveCols.map((c) => el("td", {}, c === "elapsed" ? r.elapsed.toFixed(1) + " s" : fmt(r[c])))))));
    if (ended && offset === 0) await load(); // a finished episode moved to the table below
  }
  await Promise.all([load(), loadLive()]);
  // Live rows poll every second while there are any; otherwise both tables every POLL_MS.
  let ticks = 0;
  timer = setInterval(() => {
    ticks += 1;
    const slow = ticks % Math.round(POLL_MS / LIVE_POLL_MS) === 0;
    if (liveCount || slow) loadLive().catch(() => {});
    if (slow && offset === 0) load().catch(() => {});
  }, LIVE_POLL_MS);
}

// One in-flight episode: its prompt and each model turn as it returns, polled every second;
// once it ends, a link to its finished trace.
async function showLive(main, run, traceId) {
  const back = el("a", { href: `#/run/${encodeURIComponent(run)}/traces` }, "‹ episodes");
  const head = el("span", { class: "muted", id: "live-head" });
  const box = el("div", { id: "live-events" });
  main.append(el("p", {}, back, " ", head), box);
  let shown = -1;
  async function load() {
    let ep;
    try { ep = await api(runPath(run, "live/" + encodeURIComponent(traceId))); }
    catch (err) { return finished(); }
    const r = ep.row;
    head.textContent = `${r.id} · ${r.status} · ${r.kind} · env ${r.env} · task ${r.task_id} · version ${fmt(r.version)} · ${r.turns} turns · ${r.tokens} tokens · ${r.elapsed.toFixed(1)} s`;
    if (ep.events.length === shown) return;
    shown = ep.events.length;
    const turns = ep.events.filter((e) => e.event === "turn");
    box.replaceChildren(...ep.prompt.map((m) => el("div", { class: "msg" }, el("b", {}, m.role || "?"), "  ", contentView(m.content))),
      ...turns.map((t) => el("div", { class: "msg live-turn" }, el("b", {}, `${t.agent || "assistant"} · turn ${t.turn}`), el("span", { class: "muted" }, `  ${t.tokens} tokens · ${t.finish_reason}`), "\n", t.text)),
      el("p", { class: "muted" }, r.status === "pending" ? "waiting to start…" : "sampling…"));
  }
  async function finished() {
    clearInterval(timer); timer = null;
    const res = await api(runPath(run, `episodes?id=${encodeURIComponent(traceId)}`)).catch(() => ({ rows: [] }));
    const done = res.rows[0];
    box.append(el("p", { id: "live-done" }, "This episode finished. ",
      done ? el("a", { href: `#/run/${encodeURIComponent(run)}/traces/${done.line}` }, "Open its trace ›") : "Its trace appears in the episode table once written."));
  }
  await load();
  if (shown >= 0 || head.textContent) timer = setInterval(load, LIVE_POLL_MS);
}

// A message's content: a string as is; a list of chat content parts part by part, text parts
// as text and image parts as thumbnails; anything else as JSON.
function contentView(content) {
  if (typeof content === "string") return [content];
  if (!Array.isArray(content)) return [JSON.stringify(content)];
  return content.map((p) => (isImagePart(p) ? imageView(p) : p && p.type === "text" && typeof p.text === "string" ? p.text : JSON.stringify(p)));
}

// Only inline base64 raster images are drawn: a remote URL is never fetched (the dashboard
// makes no request beyond its own server; the server's CSP says so too), and SVG can carry script.
const IMAGE_DATA_URL = /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+={0,2}$/;

function isImagePart(p) {
  return !!p && typeof p === "object" && ["image_url", "image", "input_image"].includes(p.type);
}

// The URL of an image part in the shapes chat formats use: OpenAI {image_url: {url}} or
// {image_url: "..."}, {image: "..."} (Hugging Face, verifiers), {url}, Anthropic {source: {type: "base64"}}.
function imageUrlOf(p) {
  const u = p.image_url ?? p.image ?? p.url;
  if (typeof u === "string") return u;
  if (u && typeof u.url === "string") return u.url;
  const s = p.source;
  if (s && s.type === "base64" && typeof s.data === "string") return `data:${s.media_type};base64,${s.data}`;
  return null;
}

function imageView(p) {
  const url = imageUrlOf(p);
  if (url && IMAGE_DATA_URL.test(url)) {
    const kind = url.slice("data:image/".length, url.indexOf(";"));
    const kb = (((url.length - url.indexOf(",") - 1) * 3) / 4 / 1024).toFixed(1);
    const img = el("img", { class: "thumb", src: url, alt: `${kind} image, ${kb} kB`, title: `${kind} image, ${kb} kB (click to enlarge)` });
    img.addEventListener("click", () => img.classList.toggle("open"));
    return img;
  }
  const remote = url && !url.startsWith("data:");
  const why = !url ? "no image data" : remote ? "remote URL, not loaded" : `unsupported ${url.slice(5, url.search(/[;,]|$/)) || "data"} URL`;
  return el("span", { class: "img-placeholder", title: remote ? url.slice(0, 300) : null }, `[image: ${why}]`);
}

// Colour of one value of an overlay: signed values blue (<0) / red (>0) scaled by the largest
// magnitude; non-negative values (entropy, mismatch KL) red from the branch's min to its max
// so that variation shows even when every token is high; masks orange where set.
function tint(name, value, scale) {
  if (value === null || value === undefined) return "";
  if (typeof value === "boolean" || /mask|is_masked/.test(name)) return value ? "rgba(230,140,30,.55)" : "";
  const kind = OVERLAY_KIND[name] || "pos";
  if (kind === "ratio") value = Math.log(Math.max(value, 1e-9));
  let a;
  if (kind === "logp") a = Math.min(1, -value / scale.hi);
  else if (kind === "pos") a = scale.hi > scale.lo ? (value - scale.lo) / (scale.hi - scale.lo) : 0.5;
  else a = Math.min(1, Math.abs(value) / scale.hi);
  const rgb = value < 0 && kind !== "pos" && kind !== "logp" ? "59,99,217" : "217,59,59";
  return `rgba(${rgb},${(0.05 + a * 0.45).toFixed(3)})`;
}
function scaleOf(name, values) {
  const kind = OVERLAY_KIND[name] || "pos";
  const nums = values.filter((v) => typeof v === "number" && isFinite(v)).map((v) => (kind === "ratio" ? Math.log(Math.max(v, 1e-9)) : v));
  if (!nums.length) return { lo: 0, hi: 1 };
  if (kind === "pos") return { lo: Math.min(...nums), hi: Math.max(...nums) };
  return { lo: 0, hi: Math.max(1e-6, ...nums.map(Math.abs)) };
}

async function showEpisode(main, run, line) {
  const ep = await api(runPath(run, "episodes/" + line));
  const r = ep.row, t = ep.trace;
  main.append(el("p", {}, el("a", { href: `#/run/${encodeURIComponent(run)}/traces` }, "‹ episodes"), " ",
    el("span", { class: "muted", id: "episode-head" }, `${r.id} · ${r.kind} · env ${r.env} · step ${fmt(r.step)} · reward ${fmt(r.reward)} · ${r.tokens} tokens · ${r.stop_condition || ""}${t.error ? " · error: " + t.error : ""}`)));
  if ((t.messages || []).length) {
    main.append(el("h3", { class: "section" }, "Transcript"),
      el("div", { id: "transcript" }, t.messages.map((m) => el("div", { class: "msg" }, el("b", {}, m.role || "?"), "  ", contentView(m.content)))));
  }
  const tok = ep.tokenizer || {};
  if (ep.branches.some((b) => !b.tokens) && tok.error) // ids instead of text: say why, never silently
    main.append(el("p", { class: "notice", id: "token-notice" }, `showing token ids: tokenizer ${tok.name || "(none)"} not found: ${tok.error}`));
  for (const b of ep.branches) main.append(branchView(b));
}

function branchView(b) {
  const names = Object.keys(b.overlays);
  const pick = el("select", { class: "overlay-pick" }, el("option", { value: "" }, "no overlay"), names.map((n) => el("option", { value: n }, n)));
  pick.value = names.includes("advantages") ? "advantages" : names[0] || "";
  const legend = el("span", { class: "legend" });
  const box = el("div", { class: "tokens", "data-branch": b.index });
  const tip = el("div", { class: "tip", hidden: "" });
  document.body.append(tip);
  const sampled = b.overlays.sampled_mask || [];
  const spans = b.token_ids.map((id, i) => {
    const text = b.tokens ? b.tokens[i] : `[${id}]`;
    const span = el("span", { class: "tok" + (sampled[i] ? "" : " prompt"), "data-i": i }, text);
    span.addEventListener("mousemove", (ev) => {
      tip.hidden = false; tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
      tip.textContent = [`#${i} id ${id}${b.roles ? " · " + b.roles[i] : ""}`, ...names.map((n) => `${n}: ${fmt(b.overlays[n][i])}`)].join("\n");
    });
    span.addEventListener("mouseleave", () => (tip.hidden = true));
    return span;
  });
  box.append(...spans);
  const paint = () => {
    const name = pick.value, values = b.overlays[name] || [];
    const scale = scaleOf(name, values);
    let coloured = 0;
    spans.forEach((s, i) => { const c = name ? tint(name, values[i], scale) : ""; s.style.background = c; if (c) coloured += 1; });
    box.dataset.overlay = name; box.dataset.coloured = coloured;
    const range = OVERLAY_KIND[name] === undefined || OVERLAY_KIND[name] === "pos" ? `${fmt(scale.lo)} … ${fmt(scale.hi)}` : `±${fmt(scale.hi)}`;
    legend.textContent = name ? `${name}: ${/mask/.test(name) ? "orange = set" : `red = high, blue = negative, range ${range}`} · ${coloured} tokens coloured` : "";
  };
  pick.addEventListener("change", paint);
  paint();
  const src = b.export_step !== null && b.export_step !== undefined ? `token export step ${b.export_step}` : "no token export for this branch";
  return el("section", { class: "branch" }, el("h3", { class: "section" }, `Branch ${b.index} (${b.agent || "default"}) · ${b.token_ids.length} tokens · ${src}`),
    el("div", { class: "toolbar" }, "overlay", pick, legend), box);
}
