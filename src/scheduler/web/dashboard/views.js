// The dashboard's views beyond the overview: the task stream, workers (a page at a time), scaling
// (demand, a chart per manager, the decision log), a job's page and allocations. Each loads what
// it shows when it is open (app.js calls it). Read-only.
"use strict";

// ---- task stream: runs per worker, packed into lanes (a worker's runs at once), per job a colour
let stream = null;
let streamLoading = false;
let streamBoxes = [];
function loadStream() {
  if (streamLoading) return;
  streamLoading = true;
  get(`/api/stream?seconds=${$("stream-range").value}`).then((r) => r.json())
    .then((s) => { stream = s; drawStream(); }).catch(() => {})
    .finally(() => { streamLoading = false; });
}

const jobColour = (job) => `hsl(${(job * 137.508) % 360}, 55%, 58%)`;
const LANE = 14;
const LABELS = 130;

function drawStream() {
  if (!stream) return;
  const canvas = $("stream-canvas");
  const byWorker = new Map();
  for (const r of stream.runs) {
    if (!byWorker.has(r.worker)) byWorker.set(r.worker, []);
    byWorker.get(r.worker).push(r);
  }
  // Lanes: each run in the first lane of its worker free when it starts.
  const rows = [];
  for (const worker of [...byWorker.keys()].sort()) {
    const runs = byWorker.get(worker).sort((a, b) => a.start - b.start);
    const ends = [];
    const first = rows.length;
    for (const r of runs) {
      let lane = ends.findIndex((end) => end <= r.start);
      if (lane < 0) { lane = ends.length; ends.push(0); rows.push({ worker: lane === 0 ? worker : "", runs: [] }); }
      ends[lane] = r.end ?? Infinity;
      rows[first + lane].runs.push(r);
    }
  }
  const width = canvas.clientWidth || 1000;
  const height = Math.max(40, rows.length * LANE + 24);
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  canvas.style.height = `${height}px`;
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  // The range asked for, or less when the runs began later (a young cluster fills the width).
  const end = stream.now;
  const earliest = Math.min(end - 10, ...stream.runs.map((r) => r.start));
  const start = Math.max(end - stream.seconds, earliest - 0.05 * (end - earliest));
  const x = (t) => LABELS + ((Math.max(t, start) - start) / (end - start)) * (width - LABELS - 4);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#777";
  for (let i = 0; i <= 4; i++) {
    const t = start + (i * (end - start)) / 4;
    g.fillText(new Date(t * 1000).toLocaleTimeString(), Math.min(x(t), width - 60), height - 6);
  }
  streamBoxes = [];
  rows.forEach((row, i) => {
    const y = i * LANE;
    g.fillStyle = "#444";
    if (row.worker) g.fillText(row.worker, 2, y + 11, LABELS - 6);
    for (const r of row.runs) {
      const x0 = x(r.start), x1 = Math.max(x0 + 2, x(r.end ?? end));
      g.fillStyle = r.failed ? "#d62728" : jobColour(r.job);
      g.fillRect(x0, y + 2, x1 - x0, LANE - 4);
      if (r.failed) { g.strokeStyle = "#600"; g.lineWidth = 1.5; g.strokeRect(x0, y + 2, x1 - x0, LANE - 4); }
      streamBoxes.push({ x0, x1, y0: y, y1: y + LANE, run: r });
    }
  });
  canvas.dataset.runs = stream.runs.length;
  canvas.dataset.failed = stream.runs.filter((r) => r.failed).length;
  canvas.dataset.lanes = rows.length;
}

function runAt(event) {
  const box = $("stream-canvas").getBoundingClientRect();
  const px = event.clientX - box.left, py = event.clientY - box.top;
  return streamBoxes.find((b) => px >= b.x0 && px <= b.x1 && py >= b.y0 && py < b.y1);
}
$("stream-canvas").addEventListener("mousemove", (event) => {
  const hit = runAt(event);
  const tip = $("stream-tip");
  tip.hidden = !hit;
  if (!hit) return;
  const r = hit.run;
  const took = ((r.end ?? stream.now) - r.start).toFixed(2);
  tip.textContent = `task ${r.task} (job ${r.job}) on ${r.worker}\n${r.end == null ? "running for" : r.failed ? "failed after" : "took"} ${took} s`;
  tip.style.left = `${Math.min(hit.x1 + 8, $("stream-canvas").clientWidth - 220)}px`;
  tip.style.top = `${hit.y1}px`;
});
$("stream-canvas").addEventListener("mouseleave", () => { $("stream-tip").hidden = true; });
$("stream-canvas").addEventListener("click", (event) => {
  const hit = runAt(event);
  if (!hit) return;
  const id = hit.run.task;
  get(`/api/explain/${id}`).then((r) => r.json())
    .then((lines) => { $("stream-explain").textContent = lines.join("\n"); })
    .catch((why) => { $("stream-explain").textContent = `task ${id}: ${why}`; });
});
$("stream-range").addEventListener("change", loadStream);

// ---- workers: a page at a time, sorted and filtered by the scheduler
let workerOffset = 0;
const WORKER_PAGE = 50;
let workersLoading = false;
function loadWorkers() {
  if (workersLoading) return;
  workersLoading = true;
  const q = encodeURIComponent($("worker-filter").value);
  const sort = $("worker-sort").value;
  get(`/api/workers?offset=${workerOffset}&limit=${WORKER_PAGE}&sort=${sort}&q=${q}`).then((r) => r.json())
    .then(showWorkers).catch(() => {}).finally(() => { workersLoading = false; });
}

function showWorkers(page) {
  if (page.total > 0 && workerOffset >= page.total) { workerOffset = 0; loadWorkers(); return; }
  const body = $("workers").tBodies[0];
  body.replaceChildren();
  for (const w of page.workers) {
    const row = body.insertRow();
    row.dataset.worker = w.name;
    cell(row, w.name);
    cell(row, w.manager ?? "–");
    cell(row, w.worker_type || "–");
    const busy = cell(row, track([[w.running, "bar"]], w.slots, true), "nowrap");
    busy.appendChild(document.createTextNode(` ${w.running}/${w.slots}`));
    const tasks = w.tasks.slice(0, 8).join(", ") + (w.tasks.length > 8 ? ` … (${w.tasks.length})` : "");
    cell(row, tasks || "–", "tasks");
    cell(row, w.prefetched, "n");
    cell(row, duration(w.up_ms), "n");
    cell(row, duration(w.left_ms), "n");
    cell(row, w.stopping ? "stopping" : w.drained ? "drained by the policy" : "open");
    const marks = { "match": "✓", "no-match": "✗", "error": "!", "pending": "…" };
    cell(row, w.verdicts.map(([env, v]) => `${env} ${marks[v]}`).join("  ") || "–");
  }
  const last = Math.min(page.total, page.offset + page.workers.length);
  $("worker-range").textContent = page.total ? `${page.offset + 1}–${last} of ${page.total}` : "no workers";
  $("workers").dataset.total = page.total;
  $("worker-prev").disabled = page.offset === 0;
  $("worker-next").disabled = last >= page.total;
}
$("worker-filter").addEventListener("input", () => { workerOffset = 0; loadWorkers(); });
$("worker-sort").addEventListener("change", () => { workerOffset = 0; loadWorkers(); });
$("worker-prev").addEventListener("click", () => { workerOffset = Math.max(0, workerOffset - WORKER_PAGE); loadWorkers(); });
$("worker-next").addEventListener("click", () => { workerOffset += WORKER_PAGE; loadWorkers(); });

// ---- scaling: demand, per-manager small multiples, the decision log
const MULTIPLES = 48;
const multiples = new Map();
function showDemand(snapshot) {
  const body = $("demand").tBodies[0];
  body.replaceChildren();
  for (const d of snapshot.demand ?? []) {
    const row = body.insertRow();
    const needs = [...d.capabilities.map(([n, v]) => `${n} ${v}`), ...d.environments];
    cell(row, needs.join(", ") || "anything");
    cell(row, d.queued, "n");
    cell(row, d.running, "n");
    cell(row, d.queued ? duration(d.oldest_queued_ms) : "–", "n");
    const r = d.runtimes;
    cell(row, r ? `${duration(r.p50_ms)} / ${duration(r.p90_ms)} / ${duration(r.max_ms)} (${r.count})` : "–", "n");
    // Queued work that no able manager can grow for or has an idle worker for is unserved.
    const unserved = d.queued > 0 && (d.able === 0 || (d.below_cap === 0 && d.idle_workers === 0));
    const able = d.able === 0 ? "none" : `${d.able} (${d.below_cap} below their cap, ${d.idle_workers} idle workers)`;
    cell(row, unserved ? `${able}: unserved, no manager offers more` : able, unserved ? "failed" : "");
    row.dataset.unserved = unserved;
  }
  if (!body.rows.length) cell(body.insertRow(), "no task queued or running", "muted").colSpan = 6;
}

let scalingLoading = false;
function loadScaling() {
  if (scalingLoading) return;
  scalingLoading = true;
  get("/api/scaling").then((r) => r.json()).then(showScaling).catch(() => {})
    .finally(() => { scalingLoading = false; });
}

function showScaling(scaling) {
  const ids = Object.keys(scaling.managers).sort((a, b) => {
    const ta = scaling.managers[a].tier ?? Infinity, tb = scaling.managers[b].tier ?? Infinity;
    return ta - tb || a.localeCompare(b);
  });
  const since = Date.now() / 1000 - Number($("scaling-range").value);
  const box = $("multiples");
  const shown = ids.slice(0, MULTIPLES);
  for (const [id, m] of multiples) if (!shown.includes(id)) { m.plot.destroy(); m.div.remove(); multiples.delete(id); }
  for (const id of shown) {
    const points = scaling.managers[id].points.filter((p) => p[0] >= since);
    // And now, from the last snapshot (the points are 10 s apart).
    const now = last && last.status.managers.find((m) => m.id === id);
    if (now) points.push([Math.round(Date.now() / 1000), now.desired ?? 0, now.live, now.starting]);
    const data = [points.map((p) => p[0]), points.map((p) => p[1]), points.map((p) => p[2]), points.map((p) => p[3])];
    let m = multiples.get(id);
    if (!m) {
      const div = document.createElement("div");
      div.dataset.manager = id;
      const title = document.createElement("h3");
      div.appendChild(title);
      box.appendChild(div);
      const plot = new uPlot({
        width: 320, height: 130,
        series: [{}, { label: "desired", stroke: "#2a6fdb", width: 2, dash: [6, 3] },
          { label: "live", stroke: "#17a589", width: 2 }, { label: "starting", stroke: "#f39c12", width: 1 }],
        axes: [{ size: 30 }, { size: 35 }],
        scales: { x: { time: true } },
      }, data, div);
      m = { div, title, plot };
      multiples.set(id, m);
    } else {
      m.plot.setData(data);
    }
    m.title.textContent = `${id} (${tierLabel(scaling.managers[id].tier)})`;
    legendAtEnd(m.plot);
  }
  box.dataset.managers = Math.min(ids.length, MULTIPLES);
  if (ids.length > MULTIPLES) box.title = `the first ${MULTIPLES} of ${ids.length} managers, by tier`;

  const body = $("log").tBodies[0];
  body.replaceChildren();
  for (const e of [...scaling.log].reverse().slice(0, 200)) {
    const row = body.insertRow();
    if (e.manager) row.dataset.manager = e.manager;
    cell(row, new Date(e.t * 1000).toLocaleTimeString(), "nowrap");
    cell(row, e.manager ?? "policy");
    cell(row, e.desired == null ? "" : `${e.from ?? "–"} → ${e.desired}`, "n");
    cell(row, e.stop || "", "n");
    cell(row, e.drain || "", "n");
    cell(row, e.what, e.manager ? "muted" : "");
  }
  $("log").dataset.entries = scaling.log.length;
}
$("scaling-range").addEventListener("change", loadScaling);

// ---- one job: progress, failures with what went wrong, retries, where its tasks ran
function loadJob() {
  const id = jobShown;
  get(`/api/job/${id}`).then((r) => r.json()).then((d) => { if (id === jobShown) showJob(d); })
    .catch((why) => { $("job-title").textContent = `job ${id}: ${why}`; });
}

function showJob(d) {
  const c = d.counts;
  const total = c.queued + c.running + c.succeeded + c.failed + c.canceled;
  $("job-title").textContent = `Job ${d.job}${d.forgotten ? " (forgotten: its results are gone)" : ""}`;
  $("job-progress").replaceChildren(track([[c.succeeded, "bar"], [c.failed + c.canceled, "bar fail"]], total));
  $("job-counts").textContent = ` ${c.succeeded + c.failed + c.canceled}/${total} done · ${c.queued} queued · ${c.running} running · ${c.succeeded} succeeded · ${c.failed} failed · ${c.canceled} canceled`;
  const failures = $("job-failures").tBodies[0];
  failures.replaceChildren();
  for (const f of d.failures) {
    const row = failures.insertRow();
    row.dataset.task = f.task;
    cell(row, f.task);
    cell(row, f.attempts, "n");
    cell(row, f.ran_on ?? "–");
    cell(row, f.error, "error-text");
  }
  if (!d.failures.length) cell(failures.insertRow(), "none", "muted").colSpan = 4;
  $("job-failures").dataset.count = d.failures.length;
  $("job-retried").textContent = d.retried_total ? `(${d.retried_total})` : "";
  const retries = $("job-retries").tBodies[0];
  retries.replaceChildren();
  for (const [task, runs] of d.retried) { const row = retries.insertRow(); cell(row, task); cell(row, runs, "n"); }
  if (!d.retried.length) cell(retries.insertRow(), "none", "muted").colSpan = 2;
  const places = $("job-places").tBodies[0];
  places.replaceChildren();
  for (const [place, n] of d.ran_on) { const row = places.insertRow(); cell(row, place); cell(row, n, "n"); }
}

// ---- allocations: every unit of every manager (/api/allocations: asked when shown, then every
// 5 s; the event stream carries only their counts)
function loadAllocations() {
  get("/api/allocations").then((r) => r.json()).then(showAllocations).catch(() => {});
}
function showAllocations(managers) {
  const body = $("allocations").tBodies[0];
  body.replaceChildren();
  for (const m of managers) {
    for (const u of m.units) {
      const row = body.insertRow();
      row.dataset.manager = m.id;
      row.dataset.unit = u.id;
      cell(row, m.id);
      cell(row, m.backend);
      cell(row, u.id);
      cell(row, u.state, u.state === "ended" && u.reason && u.reason !== "drained" ? "failed" : "");
      cell(row, u.reason ?? "");
      cell(row, duration(u.age_ms), "n");
      cell(row, duration(u.time_left_ms), "n");
      cell(row, u.worker_count, "n");
    }
  }
}

