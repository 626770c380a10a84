// Weir dashboard: polls the Flink-compatible REST API once a second and draws the job graph,
// checkpoint counts, charts, history, per-subtask details and failures. No libraries.
"use strict";

const POLL_MS = 1000;
const MAX_POINTS = 120;
const SVG_NS = "http://www.w3.org/2000/svg";

const state = {
  jobId: null,
  status: null,
  previous: null, // { at, vertices: {id: {in, out}} } for rates
  rates: {}, // vertex id -> { in, out } per second
  series: new Map(), // checkpoint id -> { id, status, duration, full, incremental, savepoint }
  selected: null,
  failedPolls: 0,
};

// ---- API -------------------------------------------------------------------------------------

function token() {
  const fromUrl = new URLSearchParams(window.location.search).get("token");
  if (fromUrl) {
    sessionStorage.setItem("weir-token", fromUrl);
    history.replaceState(null, "", window.location.pathname);
  }
  return sessionStorage.getItem("weir-token");
}
const TOKEN = token();

async function api(path, options = {}) {
  const headers = { Accept: "application/json" };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  if (TOKEN) headers.Authorization = "Bearer " + TOKEN;
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    cache: "no-store",
  });
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    body = null;
  }
  if (!response.ok) {
    const message = body && body.errors ? body.errors.join("; ") : response.status + " " + response.statusText;
    throw new Error(message);
  }
  return body;
}

// ---- formatting --------------------------------------------------------------------------------

function bytes(n) {
  if (n === undefined || n === null || n < 0) return "-";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  let v = n;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + units[i];
}

function si(n) {
  if (!isFinite(n)) return "-";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + " k";
  return n >= 10 || n === 0 ? n.toFixed(0) : n.toFixed(1);
}

function records(n) {
  if (n === undefined || n === null || n < 0) return "-";
  return si(n) + (n === 1 ? " record" : " records");
}

// The mark of a checkpoint (or a subtask's part of it) taken unaligned.
function unalignedMark() {
  return el("span", { class: "unaligned", title: "barriers overtook the queued data, which was stored as channel state", text: "unaligned" });
}

function ms(n) {
  if (n === undefined || n === null || n < 0) return "-";
  return n >= 10000 ? (n / 1000).toFixed(1) + " s" : n + " ms";
}

function time(ts) {
  if (!ts || ts < 0) return "-";
  return new Date(ts).toLocaleTimeString();
}

function duration(msTotal) {
  const s = Math.max(0, Math.floor(msTotal / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return (h ? h + " h " : "") + (h || m ? m + " min " : "") + (s % 60) + " s";
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function setText(id, text) {
  const node = document.getElementById(id);
  if (node.textContent !== String(text)) node.textContent = text;
}

function notice(message, kind = "") {
  const box = document.getElementById("notices");
  const n = el("div", { class: "notice " + kind, text: message });
  box.prepend(n);
  while (box.children.length > 4) box.lastChild.remove();
  setTimeout(() => n.remove(), 15000);
}

// ---- rendering ---------------------------------------------------------------------------------

function renderJob(job) {
  setText("job-name", job.name);
  setText("job-id", job.jid);
  setText("job-duration", duration(job.duration));
  const badge = document.getElementById("job-state");
  badge.textContent = job.state;
  badge.className = "state " + job.state;
  const running = job.state === "RUNNING";
  for (const id of ["btn-checkpoint", "btn-savepoint", "btn-stop"]) {
    document.getElementById(id).disabled = !running;
  }
}

function updateRates(job) {
  const now = job.now;
  const vertices = {};
  for (const v of job.vertices) vertices[v.id] = { in: v.metrics["read-records"], out: v.metrics["write-records"] };
  const prev = state.previous;
  if (prev && now > prev.at) {
    const dt = (now - prev.at) / 1000;
    for (const [id, c] of Object.entries(vertices)) {
      const p = prev.vertices[id];
      if (p && c.in >= p.in && c.out >= p.out) {
        state.rates[id] = { in: (c.in - p.in) / dt, out: (c.out - p.out) / dt };
      }
    }
  }
  state.previous = { at: now, vertices };
}

function renderGraph(job) {
  const graph = document.getElementById("graph");
  const nodes = job.plan.nodes;
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const depth = new Map();
  const depthOf = (n, seen = new Set()) => {
    if (depth.has(n.id)) return depth.get(n.id);
    if (seen.has(n.id)) return 0;
    seen.add(n.id);
    const d = n.inputs.length === 0 ? 0 : 1 + Math.max(...n.inputs.map((i) => (byId.has(i.id) ? depthOf(byId.get(i.id), seen) : 0)));
    depth.set(n.id, d);
    return d;
  };
  nodes.forEach((n) => depthOf(n));
  const layers = new Map();
  for (const n of nodes) {
    const d = depth.get(n.id);
    if (!layers.has(d)) layers.set(d, []);
    layers.get(d).push(n);
  }
  const W = 200, H = 66, GX = 70, GY = 18, PAD = 10;
  const pos = new Map();
  let maxRows = 1;
  for (const [d, layer] of layers) {
    maxRows = Math.max(maxRows, layer.length);
    layer.forEach((n, i) => pos.set(n.id, { x: PAD + d * (W + GX), y: PAD + i * (H + GY) }));
  }
  const width = PAD * 2 + layers.size * (W + GX) - GX;
  const height = PAD * 2 + maxRows * (H + GY) - GY;
  graph.setAttribute("viewBox", `0 0 ${width} ${height}`);
  graph.style.height = Math.max(100, height) + "px";
  graph.replaceChildren();
  const defs = svg("defs");
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" });
  marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8c959f" }));
  defs.append(marker);
  graph.append(defs);
  for (const n of nodes) {
    for (const input of n.inputs) {
      const a = pos.get(input.id), b = pos.get(n.id);
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      const mx = (x1 + x2) / 2;
      graph.append(svg("path", { class: "graph-edge", d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, "marker-end": "url(#arrow)" }));
      graph.append(svg("text", { class: "graph-edge-label", x: mx, y: (y1 + y2) / 2 - 5, "text-anchor": "middle" }, input.ship_strategy));
    }
  }
  const vertexById = new Map(job.vertices.map((v) => [v.id, v]));
  for (const n of nodes) {
    const p = pos.get(n.id);
    const v = vertexById.get(n.id);
    const rate = state.rates[n.id];
    const kind = n.operator === "Source" ? "source" : n.operator === "Sink" ? "sink" : "operator";
    const g = svg("g", { class: "graph-node " + kind, transform: `translate(${p.x},${p.y})`, "data-vertex": n.id });
    g.append(svg("rect", { width: W, height: H, rx: 6 }));
    g.append(svg("text", { class: "name", x: 10, y: 19 }, n.description));
    g.append(svg("text", { x: 10, y: 37 }, `parallelism ${n.parallelism}` + (v ? ` · ${v.status.toLowerCase()}` : "")));
    const rateText = rate
      ? (kind === "source" ? `${si(rate.out)} records/s out` : `${si(rate.in)} records/s in` + (kind === "sink" ? "" : ` · ${si(rate.out)} out`))
      : "records/s: measuring…";
    g.append(svg("text", { class: "rate", x: 10, y: 55 }, rateText));
    graph.append(g);
  }
  const sourceRate = nodes
    .filter((n) => n.operator === "Source")
    .reduce((sum, n) => sum + (state.rates[n.id] ? state.rates[n.id].out : 0), 0);
  setText("source-rate", Object.keys(state.rates).length ? si(sourceRate) : "-");
}

function renderCounts(stats) {
  const c = stats.counts;
  setText("completed-count", c.completed);
  setText("failed-count", c.failed);
  setText("in-progress-count", c.in_progress);
  setText("restored-count", c.restored);
  const last = stats.latest.completed;
  setText("last-duration", last ? ms(last.end_to_end_duration) : "-");
  setText("last-size", last ? bytes(last.state_size) + " / " + bytes(last.checkpointed_size) : "-");
}

function renderHistory(stats) {
  const body = document.getElementById("history-rows");
  const rows = stats.history.map((h) => {
    const type = h.is_savepoint ? (h.checkpoint_type === "SYNC_SAVEPOINT" ? "savepoint (stop)" : "savepoint") : "checkpoint";
    const typeCell = el("td", { class: "type" }, type);
    if (h.checkpoint_type === "UNALIGNED_CHECKPOINT") typeCell.append(" ", unalignedMark());
    const tr = el(
      "tr",
      { class: "status-" + h.status + (state.selected === h.id ? " selected" : ""), "data-checkpoint-id": String(h.id) },
      el("td", { text: String(h.id) }),
      el("td", { class: "status-" + h.status, text: h.status }),
      typeCell,
      el("td", { text: time(h.trigger_timestamp) }),
      el("td", { text: ms(h.end_to_end_duration) }),
      el("td", { text: bytes(h.state_size) }),
      el("td", { text: bytes(h.checkpointed_size) }),
      el("td", { class: "persisted-data", text: bytes(h.persisted_data) }),
      el("td", { class: "processed-data", text: records(h.processed_data) }),
      el("td", { text: `${h.num_acknowledged_subtasks}/${h.num_subtasks}` })
    );
    if (h.status === "FAILED" && h.failure_message) tr.title = h.failure_message;
    tr.addEventListener("click", () => showDetails(h.id));
    return tr;
  });
  body.replaceChildren(...rows);
}

function remember(stats) {
  for (const h of stats.history) {
    state.series.set(h.id, {
      id: h.id,
      status: h.status,
      duration: h.end_to_end_duration,
      full: h.state_size,
      incremental: h.checkpointed_size,
      at: h.trigger_timestamp,
    });
  }
  const ids = [...state.series.keys()].sort((a, b) => a - b);
  while (ids.length > MAX_POINTS) state.series.delete(ids.shift());
}

function axes(chart, width, height, left, bottom, maxValue, format, points) {
  chart.append(svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width, y2: height - bottom }));
  chart.append(svg("line", { class: "axis", x1: left, y1: 4, x2: left, y2: height - bottom }));
  for (const f of [0, 0.5, 1]) {
    const y = height - bottom - f * (height - bottom - 8);
    chart.append(svg("text", { class: "axis-label", x: left - 4, y: y + 3, "text-anchor": "end" }, format(maxValue * f)));
  }
  if (points.length) {
    chart.append(svg("text", { class: "axis-label", x: left, y: height - 2 }, "#" + points[0].id + " " + time(points[0].at)));
    const last = points[points.length - 1];
    chart.append(svg("text", { class: "axis-label", x: width, y: height - 2, "text-anchor": "end" }, "#" + last.id + " " + time(last.at)));
  }
}

function renderCharts() {
  const points = [...state.series.values()].filter((p) => p.status !== "IN_PROGRESS").sort((a, b) => a.id - b.id);
  const width = 600, height = 180, left = 56, bottom = 16;
  // Duration: one bar per checkpoint.
  const d = document.getElementById("chart-duration");
  d.setAttribute("viewBox", `0 0 ${width} ${height}`);
  d.replaceChildren();
  const maxD = Math.max(1, ...points.map((p) => p.duration));
  axes(d, width, height, left, bottom, maxD, (v) => ms(Math.round(v)), points);
  const slot = (width - left - 4) / Math.max(points.length, 1);
  points.forEach((p, i) => {
    const h = (p.duration / maxD) * (height - bottom - 8);
    const bar = svg("rect", {
      class: "bar-duration" + (p.status === "FAILED" ? " failed" : ""),
      x: left + 2 + i * slot,
      y: height - bottom - h,
      width: Math.max(1, slot - 2),
      height: Math.max(0, h),
    });
    bar.append(svg("title", {}, `#${p.id}: ${ms(p.duration)} (${p.status.toLowerCase()})`));
    d.append(bar);
  });
  // Size: full and incremental lines.
  const s = document.getElementById("chart-size");
  s.setAttribute("viewBox", `0 0 ${width} ${height}`);
  s.replaceChildren();
  const done = points.filter((p) => p.status === "COMPLETED");
  const maxS = Math.max(1, ...done.map((p) => Math.max(p.full, p.incremental)));
  axes(s, width, height, left, bottom, maxS, bytes, done);
  const x = (i) => left + 4 + (done.length > 1 ? (i * (width - left - 8)) / (done.length - 1) : (width - left) / 2);
  const y = (v) => height - bottom - (v / maxS) * (height - bottom - 8);
  for (const key of ["full", "incremental"]) {
    if (!done.length) break;
    const path = done.map((p, i) => (i ? "L" : "M") + x(i).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" ");
    s.append(svg("path", { class: "line-" + key, d: path }));
    done.forEach((p, i) => {
      const dot = svg("circle", { class: "dot-" + key, cx: x(i), cy: y(p[key]), r: 2.5 });
      dot.append(svg("title", {}, `#${p.id} ${key}: ${bytes(p[key])}`));
      s.append(dot);
    });
  }
}

function renderFailures(stats, exceptions) {
  const list = document.getElementById("failures");
  const items = [];
  for (const e of (exceptions && exceptions.exceptionHistory.entries) || []) {
    items.push(el("li", {}, el("strong", { text: "job failed" }), " " + time(e.timestamp) + ": ", el("span", { class: "failure-reason", text: e.stacktrace })));
  }
  const failed = new Map();
  if (stats.latest.failed) failed.set(stats.latest.failed.id, stats.latest.failed);
  for (const h of stats.history) if (h.status === "FAILED") failed.set(h.id, h);
  for (const f of [...failed.values()].sort((a, b) => b.id - a.id)) {
    items.push(
      el("li", {}, el("strong", { text: (f.is_savepoint ? "savepoint " : "checkpoint ") + f.id }), " " + time(f.failure_timestamp) + ": ", el("span", { class: "failure-reason", text: f.failure_message || "unknown reason" }))
    );
  }
  if (!items.length) items.push(el("li", { class: "none", text: "none" }));
  list.replaceChildren(...items);
}

async function showDetails(id) {
  state.selected = id;
  if (window.location.hash !== "#checkpoint=" + id) history.replaceState(null, "", "#checkpoint=" + id);
  document.querySelectorAll("#history-rows tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.checkpointId === String(id)));
  const section = document.getElementById("details");
  const body = document.getElementById("details-body");
  section.hidden = false;
  setText("details-id", String(id));
  body.replaceChildren(el("p", { class: "muted", text: "loading…" }));
  try {
    const details = await api(`jobs/${state.jobId}/checkpoints/details/${id}`);
    const names = new Map((state.lastJob ? state.lastJob.vertices : []).map((v) => [v.id, v.name]));
    const parts = [];
    const unaligned = details.checkpoint_type === "UNALIGNED_CHECKPOINT";
    const summary = el("p", {},
      el("span", { class: "status-" + details.status, text: details.status }),
      ` · ${details.is_savepoint ? "savepoint" : "checkpoint"}`);
    if (unaligned) summary.append(" ", unalignedMark());
    summary.append(
      ` · triggered ${time(details.trigger_timestamp)} · end-to-end ${ms(details.end_to_end_duration)} · size ${bytes(details.state_size)} (incremental ${bytes(details.checkpointed_size)})` +
        ` · in-flight data persisted ${bytes(details.persisted_data)} · processed during alignment ${records(details.processed_data)}` +
        (details.external_path ? ` · ${details.external_path}` : ""));
    parts.push(summary);
    if (details.failure_message) parts.push(el("p", { class: "failure-reason", text: details.failure_message }));
    const graphOrder = (state.lastJob ? state.lastJob.vertices : []).map((v) => v.id).filter((v) => v in details.tasks);
    const vertexIds = graphOrder.concat(Object.keys(details.tasks).filter((v) => !graphOrder.includes(v)));
    for (const vertexId of vertexIds) {
      const sub = await api(`jobs/${state.jobId}/checkpoints/details/${id}/subtasks/${vertexId}`);
      const rows = sub.subtasks.map((s) =>
        el("tr", { class: "subtask" },
          el("td", { text: String(s.index) }),
          el("td", { class: s.status === "completed" ? "status-COMPLETED" : "status-IN_PROGRESS", text: s.status }),
          el("td", { text: s.ack_timestamp ? time(s.ack_timestamp) : "-" }),
          el("td", { text: s.end_to_end_duration !== undefined ? ms(s.end_to_end_duration) : "-" }),
          el("td", { text: s.checkpoint ? ms(s.checkpoint.sync) : "-" }),
          el("td", { text: s.checkpoint ? ms(s.checkpoint.async) : "-" }),
          el("td", { text: s.alignment ? ms(s.alignment.duration) : "-" }),
          el("td", { text: s.start_delay !== undefined ? ms(s.start_delay) : "-" }),
          el("td", {}, s.unaligned_checkpoint ? unalignedMark() : s.status === "completed" ? "aligned" : "-"),
          el("td", { text: s.alignment ? bytes(s.alignment.persisted) : "-" }),
          el("td", { text: s.alignment ? records(s.alignment.processed) : "-" }),
          el("td", { text: s.state_size !== undefined ? bytes(s.state_size) : "-" }),
          el("td", { text: s.checkpointed_size !== undefined ? bytes(s.checkpointed_size) : "-" })));
      const table = el("table", {},
        el("thead", {}, el("tr", {}, ...["subtask", "status", "acknowledged", "end-to-end", "sync", "async", "alignment", "start delay", "barrier", "in-flight persisted", "processed in alignment", "size", "incremental"].map((h) => el("th", { text: h })))),
        el("tbody", {}, ...rows));
      parts.push(el("div", { class: "vertex-details" },
        el("h3", { text: `${names.get(vertexId) || vertexId} — ${sub.num_acknowledged_subtasks}/${sub.num_subtasks} acknowledged` }), table));
    }
    body.replaceChildren(...parts);
  } catch (e) {
    body.replaceChildren(el("p", { class: "failure-reason", text: "could not load checkpoint " + id + ": " + e.message }));
  }
}

// ---- actions -------------------------------------------------------------------------------------

async function waitFor(path, what) {
  for (let i = 0; i < 6000; i++) {
    const r = await api(path);
    if (r.status.id === "COMPLETED") {
      const op = r.operation || {};
      const cause = op["failure-cause"] || op.failureCause;
      if (cause) throw new Error(cause["stack-trace"] || cause.class);
      return op;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(what + " did not finish in time");
}

async function checkpointNow() {
  try {
    const t = await api(`jobs/${state.jobId}/checkpoints`, { method: "POST", body: {} });
    notice("Checkpoint requested…");
    const op = await waitFor(`jobs/${state.jobId}/checkpoints/${t["request-id"]}`, "the checkpoint");
    notice(`Checkpoint ${op.checkpointId} completed.`, "ok");
  } catch (e) {
    notice("Checkpoint failed: " + e.message, "error");
  }
}

function savepointDir() {
  const dir = document.getElementById("savepoint-dir").value.trim();
  return dir === "" ? undefined : dir;
}

async function savepoint() {
  try {
    const body = { "cancel-job": false };
    const dir = savepointDir();
    if (dir) body["target-directory"] = dir;
    const t = await api(`jobs/${state.jobId}/savepoints`, { method: "POST", body });
    notice("Savepoint requested…");
    const op = await waitFor(`jobs/${state.jobId}/savepoints/${t["request-id"]}`, "the savepoint");
    notice("Savepoint completed: " + op.location, "ok");
  } catch (e) {
    notice("Savepoint failed: " + e.message, "error");
  }
}

async function stopJob() {
  if (!window.confirm("Stop the job with a final savepoint?")) return;
  try {
    const body = { drain: false };
    const dir = savepointDir();
    if (dir) body.targetDirectory = dir;
    const t = await api(`jobs/${state.jobId}/stop`, { method: "POST", body });
    notice("Stopping with a savepoint…");
    const op = await waitFor(`jobs/${state.jobId}/savepoints/${t["request-id"]}`, "the savepoint");
    notice("Job stopped. Savepoint: " + op.location, "ok");
  } catch (e) {
    notice("Stop failed: " + e.message, "error");
  }
}

// ---- polling -------------------------------------------------------------------------------------

async function poll() {
  try {
    const overview = await api("jobs/overview");
    if (!overview.jobs.length) throw new Error("no job is served here");
    state.jobId = overview.jobs[0].jid;
    const [job, stats, exceptions] = await Promise.all([
      api(`jobs/${state.jobId}`),
      api(`jobs/${state.jobId}/checkpoints`),
      api(`jobs/${state.jobId}/exceptions`),
    ]);
    state.lastJob = job;
    updateRates(job);
    renderJob(job);
    renderGraph(job);
    renderCounts(stats);
    remember(stats);
    renderHistory(stats);
    renderCharts();
    renderFailures(stats, exceptions);
    const linked = /^#checkpoint=(\d+)$/.exec(window.location.hash);
    if (linked && state.selected === null) showDetails(Number(linked[1]));
    state.failedPolls = 0;
    setText("connection", "");
  } catch (e) {
    state.failedPolls++;
    setText("connection", "not connected: " + e.message);
    if (state.failedPolls > 2) {
      const badge = document.getElementById("job-state");
      badge.textContent = "DISCONNECTED";
      badge.className = "state DISCONNECTED";
      for (const id of ["btn-checkpoint", "btn-savepoint", "btn-stop"]) document.getElementById(id).disabled = true;
    }
  }
  setTimeout(poll, state.failedPolls > 2 ? POLL_MS * 3 : POLL_MS);
}

document.getElementById("btn-checkpoint").addEventListener("click", checkpointNow);
document.getElementById("btn-savepoint").addEventListener("click", savepoint);
document.getElementById("btn-stop").addEventListener("click", stopJob);
document.getElementById("details-close").addEventListener("click", () => {
  state.selected = null;
  history.replaceState(null, "", window.location.pathname);
  document.getElementById("details").hidden = true;
  document.querySelectorAll("#history-rows tr.selected").forEach((tr) => tr.classList.remove("selected"));
});
poll();
