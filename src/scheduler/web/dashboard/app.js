// The weir dashboard: a snapshot and a chart sample every second over server-sent events
// (/api/events), the last 15 minutes from /api/history at load. Read-only.
"use strict";

// Beyond loopback the scheduler printed a URL with ?token=; it stays in this page's memory.
const token = new URLSearchParams(location.search).get("token");
const withToken = (path) => token ? `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}` : path;
const get = (path) => fetch(withToken(path)).then((r) => r.ok ? r : Promise.reject(r.statusText));
const $ = (id) => document.getElementById(id);
const text = (s) => document.createTextNode(String(s));

function cell(row, value, cls) {
  const td = row.insertCell();
  if (value instanceof Node) td.appendChild(value); else td.textContent = value;
  if (cls) td.className = cls;
  return td;
}

function tierLabel(tier) { return tier == null ? "not in the policy" : `tier ${tier}`; }

// ---- the chart: live workers per tier, queued and running tasks
let samples = [];
let plot = null;
let seriesKeys = [];

function chartData() {
  const xs = samples.map((s) => s.t);
  const columns = seriesKeys.map((key) => samples.map((s) =>
    key === "queued" ? s.queued : key === "running" ? s.running : (s.tiers[key] ?? 0)));
  return [xs, ...columns];
}

function drawChart() {
  const tiers = [...new Set(samples.flatMap((s) => Object.keys(s.tiers)))].sort();
  const keys = [...tiers, "queued", "running"];
  const palette = ["#2a6fdb", "#17a589", "#8e44ad", "#d35400", "#7f8c8d"];
  const width = Math.max(300, $("chart").clientWidth || 600);
  if (!plot || keys.join() !== seriesKeys.join()) {
    seriesKeys = keys;
    if (plot) plot.destroy();
    plot = new uPlot({
      width, height: 260,
      series: [{}, ...keys.map((key, i) => ({
        label: key.startsWith("tier") || key === "not in the policy" ? `workers, ${key}` : `${key} tasks`,
        stroke: key === "queued" ? "#c0392b" : key === "running" ? "#f39c12" : palette[i % palette.length],
        width: 2,
        scale: key === "queued" || key === "running" ? "tasks" : "workers",
      }))],
      axes: [{}, { scale: "workers", label: "workers" }, { scale: "tasks", side: 1, label: "tasks", grid: { show: false } }],
      scales: { x: { time: true } },
    }, chartData(), $("chart"));
  } else {
    plot.setData(chartData());
  }
  $("chart").dataset.samples = samples.length;
  $("chart").dataset.peakTasks = Math.max(0, ...samples.map((s) => s.queued + s.running));
  $("chart").dataset.peakWorkers = Math.max(0, ...samples.map((s) => Object.values(s.tiers).reduce((a, b) => a + b, 0)));
}

// ---- tables
function showManagers(snapshot) {
  const body = $("managers").tBodies[0];
  body.replaceChildren();
  const decisions = new Map(snapshot.policy.last.map(([id, desired, reason]) => [id, reason]));
  const units = new Map((snapshot.managers ?? []).map((m) => [m.status.id, m.units]));
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
      unitsCell(row, units.get(m.id) ?? []);
      cell(row, decisions.get(m.id) ?? m.reason ?? "", "muted");
    }
  }
  $("policy").textContent = `policy ${snapshot.policy.name}`;
  $("policy-error").textContent = snapshot.policy.error ? `policy error: ${snapshot.policy.error}` : "";
  const t = snapshot.status.tasks;
  $("totals").textContent = `${snapshot.status.workers.length} workers · ${t.queued} queued · ${t.running} running · ${t.succeeded} succeeded · ${t.failed} failed`;
}

// A manager's units by state (`weir managers`), each unit in the tooltip.
function unitsCell(row, units) {
  const counts = new Map();
  for (const u of units) counts.set(u.state, (counts.get(u.state) ?? 0) + 1);
  const text = ["pending", "running", "completing", "ended"].filter((s) => counts.has(s)).map((s) => `${counts.get(s)} ${s}`);
  const td = cell(row, text.join(", ") || "–", "units");
  td.title = units.map((u) => `${u.id}: ${u.state}${u.reason ? ` (${u.reason})` : ""}, ${Math.round(u.age_ms / 1000)} s`).join("\n");
}

function showEnvironments(snapshot) {
  const managerOf = new Map(snapshot.status.workers.map((w) => [w.name, w.manager ?? "(no manager)"]));
  const managers = [...new Set([...managerOf.values()])].sort();
  const table = $("environments");
  const head = table.tHead;
  head.replaceChildren();
  const hr = head.insertRow();
  cell(hr, "environment");
  for (const m of managers) cell(hr, m);
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const env of snapshot.environments) {
    const row = body.insertRow();
    row.dataset.environment = env.name;
    cell(row, env.name);
    for (const m of managers) {
      const count = (names) => names.filter((n) => managerOf.get(n) === m).length;
      const parts = [
        ["✓", count(env.matching)], ["✗", count(env.not_matching)],
        ["!", env.erroring.filter(([n]) => managerOf.get(n) === m).length], ["…", count(env.pending)],
      ].filter(([, n]) => n > 0).map(([mark, n]) => `${mark} ${n}`);
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
    cell(row, job.job + (job.forgotten ? " (forgotten)" : ""));
    const track = document.createElement("span");
    track.className = "track";
    for (const [n, cls] of [[c.succeeded, "bar"], [c.failed + c.canceled, "bar fail"]]) {
      const bar = document.createElement("span");
      bar.className = cls;
      bar.style.width = `${total ? (100 * n) / total : 0}%`;
      track.appendChild(bar);
    }
    cell(row, track);
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

function show(snapshot) {
  showReplicas(snapshot);
  showManagers(snapshot);
  showEnvironments(snapshot);
  showJobs(snapshot);
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
  const { snapshot, sample } = JSON.parse(message.data);
  samples.push(sample);
  const since = sample.t - 15 * 60;
  while (samples.length && samples[0].t < since) samples.shift();
  drawChart();
  show(snapshot);
};
window.addEventListener("resize", () => { if (plot) plot.setSize({ width: $("chart").clientWidth, height: 260 }); });
