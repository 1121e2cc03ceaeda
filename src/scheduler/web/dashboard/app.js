// The weir dashboard: a snapshot and a chart sample every second over server-sent events
// (/api/events), the last 15 minutes from /api/history at load; the tabs, the overview and
// what every update does. The other views are in views.js, the helpers in common.js. Read-only.
"use strict";

// ---- views (tabs): #overview, #stream, #workers, #scaling, #allocations, #job/ID
const views = ["overview", "stream", "workers", "scaling", "allocations"];
let view = "overview";
let jobShown = null;
function showView() {
  const hash = location.hash.slice(1);
  const job = /^job\/(\d+)$/.exec(hash);
  jobShown = job ? Number(job[1]) : null;
  view = job ? "job" : views.includes(hash) ? hash : "overview";
  for (const el of document.querySelectorAll("[data-view]")) {
    if (el.tagName === "A") el.classList.toggle("current", el.dataset.view === view);
    else el.hidden = el.dataset.view !== view;
  }
  document.body.dataset.shown = view;
  if (view === "overview") { drawChart(); resizeCharts(); }
  if (view === "stream") loadStream();
  if (view === "job") loadJob();
  if (view === "workers") loadWorkers();
  if (view === "scaling") loadScaling();
  if (view === "allocations") loadAllocations();
}
window.addEventListener("hashchange", showView);

// ---- charts: one y-axis each; the legend shows the newest values until the cursor is on it
let samples = [];
const charts = { workers: null, tasks: null };
let workerKeys = [];

const range = () => Number($("range").value);
function recent() {
  const since = (samples.length ? samples[samples.length - 1].t : 0) - range();
  return samples.filter((s) => s.t >= since);
}

function lineChart(target, title, keys, labels, colors, data, height) {
  return new uPlot({
    width: Math.max(300, target.clientWidth || 600), height,
    series: [{}, ...keys.map((key, i) => ({ label: labels[i], stroke: colors[i], width: 2 }))],
    axes: [{}, { label: title, size: 50 }],
    scales: { x: { time: true } },
    legend: { live: true },
  }, data, target);
}

// The newest point in the legend, unless the cursor is on the chart.
function legendAtEnd(plot) {
  const at = () => {
    const n = plot.data[0].length;
    if (n > 0 && (plot.cursor.left == null || plot.cursor.left < 0)) plot.setLegend({ idx: n - 1 });
  };
  at();
  requestAnimationFrame(at);
}

function drawChart() {
  const shown = recent();
  const tiers = [...new Set(shown.flatMap((s) => Object.keys(s.tiers)))].sort();
  const palette = ["#2a6fdb", "#17a589", "#8e44ad", "#d35400", "#7f8c8d", "#b7950b"];
  const xs = shown.map((s) => s.t);
  const workerData = [xs, ...tiers.map((key) => shown.map((s) => s.tiers[key] ?? 0))];
  if (!charts.workers || tiers.join() !== workerKeys.join()) {
    workerKeys = tiers;
    if (charts.workers) charts.workers.destroy();
    charts.workers = lineChart($("chart"), "workers", tiers, tiers.map((t) => `live, ${t}`),
      tiers.map((_, i) => palette[i % palette.length]), workerData, 200);
  } else {
    charts.workers.setData(workerData);
  }
  const taskData = [xs, shown.map((s) => s.queued), shown.map((s) => s.running)];
  if (!charts.tasks) {
    charts.tasks = lineChart($("tasks-chart"), "tasks", ["queued", "running"], ["queued", "running"],
      ["#c0392b", "#f39c12"], taskData, 170);
  } else {
    charts.tasks.setData(taskData);
  }
  legendAtEnd(charts.workers);
  legendAtEnd(charts.tasks);
  $("chart").dataset.samples = samples.length;
  $("chart").dataset.peakTasks = Math.max(0, ...samples.map((s) => s.queued + s.running));
  $("chart").dataset.peakWorkers = Math.max(0, ...samples.map((s) => Object.values(s.tiers).reduce((a, b) => a + b, 0)));
}
$("range").addEventListener("change", () => { workerKeys = []; drawChart(); });

function resizeCharts() {
  for (const [plot, id] of [[charts.workers, "chart"], [charts.tasks, "tasks-chart"]]) {
    if (plot && $(id).clientWidth) plot.setSize({ width: $(id).clientWidth, height: plot.height });
  }
}
window.addEventListener("resize", resizeCharts);

// ---- overview tables
// The managers table as last drawn: redrawn only when what it shows changed (1,000 rows took
// most of an update's 50-100 ms, every second, whether anything changed or not).
let managersDrawn = null;
function showManagers(snapshot) {
  $("policy").textContent = `policy ${snapshot.policy.name}`;
  $("policy-error").textContent = snapshot.policy.error ? `policy error: ${snapshot.policy.error}` : "";
  const t = snapshot.status.tasks;
  $("totals").textContent = `${snapshot.workers} workers · ${t.queued} queued · ${t.running} running · ${t.succeeded} succeeded · ${t.failed} failed`;
  const drawn = JSON.stringify([snapshot.status.managers, snapshot.policy.last, snapshot.managers]);
  if (drawn === managersDrawn) return;
  managersDrawn = drawn;
  const body = $("managers").tBodies[0];
  body.replaceChildren();
  const decisions = new Map(snapshot.policy.last.map(([id, desired, reason]) => [id, reason]));
  const units = new Map((snapshot.managers ?? []).map((m) => [m.id, m.unit_counts]));
  const byTier = new Map();
  for (const m of snapshot.status.managers) {
    const key = m.tier ?? Infinity;
    if (!byTier.has(key)) byTier.set(key, []);
    byTier.get(key).push(m);
  }
  for (const key of [...byTier.keys()].sort((a, b) => a - b)) {
    const managers = byTier.get(key);
    const head = body.insertRow();
    head.className = "tier";
    const live = managers.reduce((n, m) => n + m.live, 0);
    cell(head, `${tierLabel(key === Infinity ? null : key)}: ${live} live`).colSpan = 8;
    for (const m of managers) {
      const row = body.insertRow();
      row.dataset.manager = m.id;
      cell(row, m.online ? m.id : `${m.id} (offline)`, m.online ? "" : "offline");
      cell(row, m.worker_type + (m.fixed != null ? `, fixed ${m.fixed}` : ""));
      cell(row, m.desired ?? "–", "n");
      cell(row, m.live, "n");
      cell(row, m.starting, "n");
      cell(row, m.max_task_concurrency === 4294967295 ? "∞" : m.max_task_concurrency, "n");
      unitsCell(row, units.get(m.id) ?? {});
      cell(row, decisions.get(m.id) ?? m.reason ?? "", "muted");
    }
  }
}

// A manager's units counted by state (`weir managers`); each unit is on the Allocations tab.
function unitsCell(row, counts) {
  const text = ["pending", "running", "completing", "ended"].filter((s) => counts[s]).map((s) => `${counts[s]} ${s}`);
  const td = cell(row, text.join(", ") || "–", "units");
  td.title = "each unit: the Allocations tab";
}

// Per environment, per manager: ✓ match, ✗ no match, ! error, … not answered (counted server-side).
function showEnvironments(snapshot) {
  const managers = Object.keys(snapshot.workers_by_manager ?? {}).sort();
  const table = $("environments");
  table.tHead.replaceChildren();
  const hr = table.tHead.insertRow();
  cell(hr, "environment");
  for (const m of managers) cell(hr, m);
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const env of snapshot.verdicts ?? []) {
    const row = body.insertRow();
    row.dataset.environment = env.name;
    cell(row, env.name);
    for (const m of managers) {
      const counts = env.managers[m] ?? [0, 0, 0, 0];
      const parts = ["✓", "✗", "!", "…"].map((mark, i) => [mark, counts[i]]).filter(([, n]) => n > 0)
        .map(([mark, n]) => `${mark} ${n}`);
      const td = cell(row, parts.join("  ") || "–");
      td.dataset.manager = m;
      td.title = "✓ match, ✗ no match, ! error, … not answered yet";
    }
  }
}

function showJobs(snapshot) {
  const body = $("jobs").tBodies[0];
  body.replaceChildren();
  for (const job of snapshot.jobs) {
    const c = job.counts;
    const total = c.queued + c.running + c.succeeded + c.failed + c.canceled;
    const done = c.succeeded + c.failed + c.canceled;
    const row = body.insertRow();
    row.dataset.job = job.job;
    const link = document.createElement("a");
    link.href = `#job/${job.job}`;
    link.textContent = job.job + (job.forgotten ? " (forgotten)" : "");
    cell(row, link);
    cell(row, track([[c.succeeded, "bar"], [c.failed + c.canceled, "bar fail"]], total));
    cell(row, `${done}/${total}`, "n");
    cell(row, c.queued, "n");
    cell(row, c.running, "n");
    cell(row, c.failed, "n");
  }
}

// Scheduler replicas (`weir replicas`): shown only when there are some.
function showReplicas(snapshot) {
  const replicas = snapshot.replicas ?? [];
  $("replicas-section").hidden = replicas.length === 0;
  const body = $("replicas").tBodies[0];
  body.replaceChildren();
  for (const r of replicas) {
    const row = body.insertRow();
    row.dataset.replica = r.id;
    cell(row, r.id);
    cell(row, r.address);
    cell(row, r.leader ? "leader" : r.voter ? "follower" : "learner (catching up)");
    cell(row, r.leader ? r.term : "", "n");
    cell(row, r.matched ?? "–", "n");
    cell(row, r.lag ?? "–", "n");
  }
}

// ---- every snapshot
let last = null;
let tick = 0;
// When the first data was on the page and how long each update took (ms), for measurements.
window.weirTimes = { first: null, updates: [] };
function show(snapshot) {
  last = snapshot;
  tick += 1;
  showReplicas(snapshot);
  showManagers(snapshot);
  showEnvironments(snapshot);
  showJobs(snapshot);
  showDemand(snapshot);
  if (weirTimes.first == null) weirTimes.first = performance.now();
  if (view === "allocations" && tick % 5 === 0) loadAllocations();
  if (view === "workers" && tick % 2 === 0) loadWorkers();
  if (view === "stream" && tick % 2 === 0) loadStream();
  if (view === "job" && tick % 5 === 0) loadJob();
  if (view === "scaling" && tick % 5 === 0) loadScaling();
}

// ---- explain
$("explain").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = $("task").value;
  get(`/api/explain/${encodeURIComponent(id)}`).then((r) => r.json())
    .then((lines) => { $("explanation").textContent = lines.join("\n"); })
    .catch((why) => { $("explanation").textContent = `task ${id}: ${why}`; });
});

// ---- start: history and a snapshot, then live events
const load = () =>
  Promise.all([get("/api/history").then((r) => r.json()), get("/api/snapshot").then((r) => r.json())])
    .then(([history, snapshot]) => { samples = history; drawChart(); show(snapshot); });
showView();
load().catch((why) => { $("live").textContent = `cannot load: ${why}`; });

const events = new EventSource(withToken("/api/events"));
let refreshing = null;
events.onopen = () => { $("live").textContent = "live"; };
events.onerror = () => {
  if (events.readyState !== EventSource.CLOSED) { $("live").textContent = "reconnecting…"; return; }
  // Refused (503: the server has all the live streams it keeps): load again every 5 s instead.
  $("live").textContent = "refreshing every 5 s";
  refreshing = refreshing || setInterval(() => load().catch(() => {}), 5000);
};
events.onmessage = (message) => {
  const began = performance.now();
  const { snapshot, sample } = JSON.parse(message.data);
  samples.push(sample);
  const since = sample.t - 15 * 60;
  while (samples.length && samples[0].t < since) samples.shift();
  if (view === "overview") drawChart();
  show(snapshot);
  weirTimes.updates.push(performance.now() - began);
  if (weirTimes.updates.length > 100) weirTimes.updates.shift();
};
