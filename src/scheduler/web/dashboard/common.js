// The weir dashboard's helpers: fetching with the page's token, table cells, durations, bars.
// Loaded first (then views.js, then app.js). Read-only.
"use strict";


// Beyond loopback the scheduler printed a URL with ?token=; it stays in this page's memory.
const token = new URLSearchParams(location.search).get("token");
const withToken = (path) => token ? `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}` : path;
const get = (path) => fetch(withToken(path)).then((r) => r.ok ? r : Promise.reject(r.statusText));
const $ = (id) => document.getElementById(id);

function cell(row, value, cls) {
  const td = row.insertCell();
  if (value instanceof Node) td.appendChild(value); else td.textContent = value;
  if (cls) td.className = cls;
  return td;
}

function tierLabel(tier) { return tier == null ? "not in the policy" : `tier ${tier}`; }

// 75 s, 4 min 10 s, 2 h 5 min.
function duration(ms) {
  if (ms == null) return "–";
  const s = Math.round(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function track(parts, total, small) {
  const span = document.createElement("span");
  span.className = small ? "track small" : "track";
  for (const [n, cls] of parts) {
    const bar = document.createElement("span");
    bar.className = cls;
    bar.style.width = `${total ? (100 * n) / total : 0}%`;
    span.appendChild(bar);
  }
  return span;
}

