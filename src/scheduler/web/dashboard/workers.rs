//! `/api/workers`: one page of the workers, sorted and filtered here, with each one's verdicts;
//! `/api/stream`: the task stream; and the summary counts the page shows instead of
//! per-worker lists.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::{Shared, ask, json, snapshot};
use crate::scheduler::event::{Snapshot, View};

/// `/api/workers` query: a page of the workers, sorted and filtered.
#[derive(serde::Deserialize)]
pub(super) struct WorkersQuery {
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
    /// `name` (default), `manager`, `busy`, `up` or `left`.
    sort: Option<String>,
    /// Kept when its name, manager or type contains this (any case).
    q: Option<String>,
}

/// Most workers one page holds.
const MAX_PAGE: usize = 500;

#[derive(Serialize)]
struct WorkerRow<'a> {
    #[serde(flatten)]
    worker: &'a crate::proto::WorkerStatus,
    up_ms: u64,
    left_ms: Option<u64>,
    /// (environment, "match" | "no-match" | "error" | "pending") for each registered one.
    verdicts: Vec<(&'a str, &'static str)>,
}

pub(super) async fn api_workers(
    State(shared): State<Shared>,
    Query(query): Query<WorkersQuery>,
) -> Response {
    let Some(snapshot) = snapshot(&shared.events).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let now = snapshot.status.now_ms;
    let needle = query.q.unwrap_or_default().to_lowercase();
    let mut workers: Vec<&crate::proto::WorkerStatus> = (snapshot.status.workers.iter())
        .filter(|w| {
            needle.is_empty()
                || [
                    w.name.as_str(),
                    w.manager.as_deref().unwrap_or(""),
                    &w.worker_type,
                ]
                .iter()
                .any(|field| field.to_lowercase().contains(&needle))
        })
        .collect();
    match query.sort.as_deref().unwrap_or("name") {
        "manager" => workers.sort_by(|a, b| (&a.manager, &a.name).cmp(&(&b.manager, &b.name))),
        "busy" => workers.sort_by(|a, b| (b.running, &a.name).cmp(&(a.running, &b.name))),
        "up" => workers.sort_by_key(|w| (w.joined_ms, w.id)),
        "left" => workers.sort_by_key(|w| (w.ends_at_ms.unwrap_or(u64::MAX), w.id)),
        _ => workers.sort_by(|a, b| a.name.cmp(&b.name)),
    }
    let total = workers.len();
    let limit = query.limit.unwrap_or(50).clamp(1, MAX_PAGE);
    let verdict_of = |name: &str| -> Vec<(&str, &'static str)> {
        (snapshot.environments.iter())
            .map(|env| {
                let has = |names: &[String]| names.iter().any(|n| n == name);
                let verdict = if has(&env.matching) {
                    "match"
                } else if has(&env.not_matching) {
                    "no-match"
                } else if env.erroring.iter().any(|(n, _)| n == name) {
                    "error"
                } else {
                    "pending"
                };
                (env.name.as_str(), verdict)
            })
            .collect()
    };
    let rows: Vec<WorkerRow<'_>> = (workers.into_iter().skip(query.offset).take(limit))
        .map(|w| WorkerRow {
            worker: w,
            up_ms: now.saturating_sub(w.joined_ms),
            left_ms: w.ends_at_ms.map(|end| end.saturating_sub(now)),
            verdicts: verdict_of(&w.name),
        })
        .collect();
    json(&serde_json::json!({ "total": total, "offset": query.offset, "workers": rows }))
}

/// The snapshot with counts per manager the page shows (`workers`, `workers_by_manager`;
/// `verdicts`: per environment, per manager, how many match, do not, fail and have not
/// answered; each manager's `id` and `unit_counts` by state; each unit's `worker_count`). With
/// `strip` (the event stream, every second), without what grows with the cluster or is there
/// twice: the worker list, each environment's worker names, and of each manager all but its
/// `id` and `unit_counts` (its status is in `status.managers`; its units and registered names
/// are not); the page asks `/api/workers` and `/api/allocations` for the rows it shows.
pub(super) fn summarized(snapshot: &Snapshot, strip: bool) -> serde_json::Value {
    let manager_of: std::collections::HashMap<&str, &str> = (snapshot.status.workers.iter())
        .map(|w| {
            (
                w.name.as_str(),
                w.manager.as_deref().unwrap_or("(no manager)"),
            )
        })
        .collect();
    let mut by_manager: BTreeMap<&str, u32> = BTreeMap::new();
    for w in &snapshot.status.workers {
        *by_manager
            .entry(w.manager.as_deref().unwrap_or("(no manager)"))
            .or_default() += 1;
    }
    let verdicts: Vec<serde_json::Value> = (snapshot.environments.iter())
        .map(|env| {
            let mut counts: BTreeMap<&str, [u32; 4]> = BTreeMap::new();
            let lists: [(usize, Vec<&str>); 4] = [
                (0, env.matching.iter().map(String::as_str).collect()),
                (1, env.not_matching.iter().map(String::as_str).collect()),
                (2, env.erroring.iter().map(|(n, _)| n.as_str()).collect()),
                (3, env.pending.iter().map(String::as_str).collect()),
            ];
            for (kind, names) in lists {
                for name in names {
                    let manager = manager_of.get(name).copied().unwrap_or("(no manager)");
                    counts.entry(manager).or_default()[kind] += 1;
                }
            }
            serde_json::json!({ "name": env.name, "managers": counts })
        })
        .collect();
    let mut value = serde_json::to_value(snapshot).unwrap_or_default();
    if let Some(managers) = value["managers"].as_array_mut() {
        for manager in managers {
            let mut by_state: BTreeMap<String, u32> = BTreeMap::new();
            for unit in manager["units"].as_array_mut().into_iter().flatten() {
                let count = unit["workers"].as_array().map_or(0, Vec::len);
                unit["worker_count"] = serde_json::json!(count);
                let state = unit["state"].as_str().unwrap_or("unknown");
                *by_state.entry(state.to_string()).or_default() += 1;
            }
            manager["unit_counts"] = serde_json::json!(by_state);
            manager["id"] = manager["status"]["id"].clone();
            // Every unit of every manager is the Allocations view's (`/api/allocations`), not
            // every second's; and each manager's status is already in `status.managers` (sent
            // twice, it was nine tenths of an event at 1,000 managers).
            if strip {
                *manager = serde_json::json!({
                    "id": manager["id"].take(),
                    "unit_counts": manager["unit_counts"].take(),
                });
            }
        }
    }
    if strip {
        value["status"]["workers"] = serde_json::Value::Array(Vec::new());
        value["environments"] = serde_json::Value::Array(Vec::new());
    }
    value["workers"] = serde_json::json!(snapshot.status.workers.len());
    value["workers_by_manager"] = serde_json::json!(by_manager);
    value["verdicts"] = serde_json::Value::Array(verdicts);
    value
}

/// `/api/stream` query: the last `seconds` (at most 15 minutes; default 5 minutes).
#[derive(serde::Deserialize)]
pub(super) struct StreamQuery {
    seconds: Option<u64>,
}

/// Most runs one answer holds (the newest).
const MAX_RUNS: usize = 5_000;

/// The task stream, its times in seconds since the Unix epoch (the page's clock).
pub(super) async fn api_stream(
    State(shared): State<Shared>,
    Query(query): Query<StreamQuery>,
) -> Response {
    let seconds = query.seconds.unwrap_or(300).clamp(1, 900);
    let asked = ask(&shared.events, |reply| View::Stream(seconds * 1000, reply)).await;
    let Some((now, mut runs)) = asked else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let at = |ms: u64| wall - now.saturating_sub(ms) as f64 / 1000.0;
    let dropped = runs.len().saturating_sub(MAX_RUNS);
    let runs: Vec<serde_json::Value> = (runs.drain(dropped..))
        .map(|r| {
            serde_json::json!({
                "task": r.task, "job": r.job, "worker": r.worker, "failed": r.failed,
                "start": at(r.started_ms), "end": r.ended_ms.map(at),
            })
        })
        .collect();
    json(&serde_json::json!({ "now": wall, "seconds": seconds, "dropped": dropped, "runs": runs }))
}

/// `/api/allocations`: every manager's units (`weir managers`), each with its worker count,
/// for the Allocations view (asked when it is shown, not every second).
pub(super) async fn api_allocations(State(shared): State<Shared>) -> Response {
    let Some(snapshot) = snapshot(&shared.events).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let managers: Vec<serde_json::Value> = (snapshot.managers.iter())
        .map(|m| {
            let units: Vec<serde_json::Value> = (m.units.iter())
                .map(|u| {
                    serde_json::json!({
                        "id": u.id,
                        "state": u.state,
                        "reason": u.reason,
                        "age_ms": u.age_ms,
                        "time_left_ms": u.time_left_ms,
                        "worker_count": u.workers.len(),
                    })
                })
                .collect();
            serde_json::json!({ "id": m.status.id, "backend": m.backend, "units": units })
        })
        .collect();
    json(&managers)
}
