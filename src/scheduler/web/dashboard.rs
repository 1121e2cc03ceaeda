//! `scheduler --dashboard ADDR`: a live web page of the waterfall, over axum.
//!
//! - `/`: the page (`dashboard/index.html`, `common.js`, `views.js`, `app.js`, and uPlot 1.6.32 vendored as
//!   `uplot.min.js`/`.css`, MIT), embedded in the binary: no CDN, works offline.
//! - `/api/snapshot`: status, environments, recent jobs, managers' units, the policy's last
//!   decisions and the demand it saw (JSON); `/api/history`: the samples of the last 15
//!   minutes; `/api/workers?offset=&limit=&sort=&q=`: one page of the workers, sorted and
//!   filtered here (10,000 workers stay one small answer); `/api/scaling`: each manager's
//!   desired, live and starting workers over the last hour and the log of decisions that
//!   changed a manager's count, policy changes and errors; `/api/allocations`: every manager's
//!   units with their worker counts; `/api/job/ID`: a job's counts, its
//!   failures with their error, retries and where its tasks ran; `/api/explain/ID`: `weir explain
//!   ID`; `/api/events`: a server-sent event per second with the snapshot (without the
//!   per-worker lists and the units: counts per manager instead) and its sample; `/metrics`:
//!   as `--metrics`.
//!
//! Read-only. Bound to loopback it needs no token; bound beyond, every request must carry the
//! read-only token (`Authorization: Bearer TOKEN` or `?token=TOKEN`): the scheduler prints a
//! URL with it at start, and the page keeps it in memory, never in what it serves.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, oneshot};

mod scaling;
mod workers;

use self::scaling::Scaling;
use self::workers::{api_workers, summarized};
use super::http::{Connection, MAX_STREAMS, MAX_STREAMS_PER_ADDRESS};
use crate::proto::TaskId;
use crate::scheduler::event::{Event, Front, Snapshot, View};

/// Samples kept for the chart: one a second for 15 minutes.
const HISTORY: usize = 15 * 60;
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// A point of the chart.
#[derive(Clone, Serialize)]
struct Sample {
    /// Seconds since the Unix epoch.
    t: u64,
    /// Live workers per tier ("tier 1", ..., "not in the policy").
    tiers: BTreeMap<String, u32>,
    queued: u64,
    running: u64,
}

#[derive(Clone)]
struct Shared {
    events: Front,
    history: Arc<Mutex<VecDeque<Sample>>>,
    scaling: Arc<Mutex<Scaling>>,
    /// Job pages answered in the last [`JOB_FRESH`], by job: a page of a job of millions of
    /// tasks walks them all in the scheduler's loop, so open tabs share one walk.
    job_pages:
        Arc<Mutex<std::collections::HashMap<crate::proto::JobId, (std::time::Instant, String)>>>,
    updates: broadcast::Sender<String>,
    token: Option<Arc<str>>,
}

/// The label of a manager's tier on the page.
fn tier_label(tier: Option<u32>) -> String {
    match tier {
        Some(priority) => format!("tier {priority}"),
        None => "not in the policy".to_string(),
    }
}

fn sample(snapshot: &Snapshot) -> Sample {
    let mut tiers = BTreeMap::new();
    for m in &snapshot.status.managers {
        *tiers.entry(tier_label(m.tier)).or_default() += m.live;
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Sample {
        t,
        tiers,
        queued: snapshot.status.tasks.queued,
        running: snapshot.status.tasks.running,
    }
}

/// Ask the actor for a view (`View::Snapshot`, `|reply| View::Job(job, reply)`...); `None`
/// when no actor answers (a replica that does not lead, a scheduler stopping).
async fn ask<T>(events: &Front, view: impl FnOnce(oneshot::Sender<T>) -> View) -> Option<T> {
    let (reply, answer) = oneshot::channel();
    events.send(Event::Dashboard(view(reply))).ok()?;
    answer.await.ok()
}

async fn snapshot(events: &Front) -> Option<Snapshot> {
    ask(events, View::Snapshot).await
}

/// Serve the page until the process ends; `token`: required when bound beyond loopback.
pub(in crate::scheduler) async fn serve(
    listener: TcpListener,
    events: Front,
    token: Option<String>,
) {
    let (updates, _) = broadcast::channel(16);
    let shared = Shared {
        events,
        history: Arc::default(),
        scaling: Arc::default(),
        job_pages: Arc::default(),
        updates,
        token: token.map(Arc::from),
    };
    tokio::spawn(sampler(shared.clone()));
    // What shows the cluster needs the token (beyond loopback); the page's own files hold no
    // data and load without it (a browser fetches them without the page's `?token=`).
    let data = Router::new()
        .route("/api/snapshot", get(api_snapshot))
        .route("/api/history", get(api_history))
        .route("/api/explain/{task}", get(api_explain))
        .route("/api/workers", get(api_workers))
        .route("/api/scaling", get(api_scaling))
        .route("/api/allocations", get(workers::api_allocations))
        .route("/api/stream", get(workers::api_stream))
        .route("/api/job/{job}", get(api_job))
        .route("/api/events", get(api_events))
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(shared.clone(), authorize));
    let app = Router::new()
        .route("/", get(|| asset("text/html; charset=utf-8", INDEX)))
        .route("/app.js", get(|| asset("text/javascript", APP)))
        .route("/common.js", get(|| asset("text/javascript", COMMON)))
        .route("/views.js", get(|| asset("text/javascript", VIEWS)))
        .route("/uplot.min.js", get(|| asset("text/javascript", UPLOT_JS)))
        .route("/uplot.min.css", get(|| asset("text/css", UPLOT_CSS)))
        .merge(data)
        .layer(middleware::from_fn_with_state(shared.clone(), same_host))
        .with_state(shared);
    super::http::serve_http(listener, app, "dashboard").await;
}

const INDEX: &str = include_str!("dashboard/index.html");
const APP: &str = include_str!("dashboard/app.js");
const COMMON: &str = include_str!("dashboard/common.js");
const VIEWS: &str = include_str!("dashboard/views.js");
const UPLOT_JS: &str = include_str!("dashboard/uplot.min.js");
const UPLOT_CSS: &str = include_str!("dashboard/uplot.min.css");

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// Bound to loopback, only requests for a loopback host name: a web page elsewhere cannot read
/// the dashboard through a name it points at 127.0.0.1 (DNS rebinding).
async fn same_host(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    if shared.token.is_some() {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    if matches!(name, "127.0.0.1" | "localhost" | "::1" | "") {
        next.run(request).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            "this dashboard answers only to 127.0.0.1, localhost or [::1]\n",
        )
            .into_response()
    }
}

/// Beyond loopback, the read-only token as a bearer or `?token=`.
async fn authorize(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    let Some(token) = &shared.token else {
        return next.run(request).await;
    };
    let bearer = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    let query = request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="));
    let given = bearer.or(query).unwrap_or("");
    if crate::net::same_token(given.as_bytes(), token.as_bytes()) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            "this dashboard needs its token: open the URL the scheduler printed\n",
        )
            .into_response()
    }
}

fn json(value: &impl Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => json_text(body),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

fn json_text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn metrics(State(shared): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    super::metrics(State(shared.events), headers).await
}

async fn api_snapshot(State(shared): State<Shared>) -> Response {
    match snapshot(&shared.events).await {
        Some(snapshot) => json(&summarized(&snapshot, false)),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "this scheduler serves nothing now: a replica that does not lead (open the leader's \
             dashboard: `weir replicas` says which one leads), or a scheduler that is stopping\n",
        )
            .into_response(),
    }
}

async fn api_history(State(shared): State<Shared>) -> Response {
    let history: Vec<Sample> = shared
        .history
        .lock()
        .map(|h| h.iter().cloned().collect())
        .unwrap_or_default();
    json(&history)
}

async fn api_scaling(State(shared): State<Shared>) -> Response {
    match shared.scaling.lock() {
        Ok(scaling) => json(&*scaling),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// How long a job page is served again without asking the scheduler.
const JOB_FRESH: Duration = Duration::from_secs(4);

async fn api_job(State(shared): State<Shared>, Path(job): Path<crate::proto::JobId>) -> Response {
    let cached = (shared.job_pages.lock().ok()).and_then(|pages| {
        pages
            .get(&job)
            .filter(|(at, _)| at.elapsed() < JOB_FRESH)
            .cloned()
    });
    if let Some((_, body)) = cached {
        return json_text(body);
    }
    match ask(&shared.events, |reply| View::Job(job, reply)).await {
        Some(Some(detail)) => match serde_json::to_string(&detail) {
            Ok(body) => {
                if let Ok(mut pages) = shared.job_pages.lock() {
                    pages.retain(|_, (at, _)| at.elapsed() < JOB_FRESH);
                    pages.insert(job, (std::time::Instant::now(), body.clone()));
                }
                json_text(body)
            }
            Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
        },
        Some(None) => (StatusCode::NOT_FOUND, format!("no job {job}")).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn api_explain(State(shared): State<Shared>, Path(task): Path<TaskId>) -> Response {
    match ask(&shared.events, |reply| View::Explain(task, reply)).await {
        Some(Some(lines)) => json(&lines),
        Some(None) => (StatusCode::NOT_FOUND, format!("no task {task}")).into_response(),
        None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// One event a second: `{"snapshot": ..., "sample": ...}`. Streams have a budget of their own
/// (`http::MAX_STREAMS`, fewer per address): past it, 503, and the page refreshes itself
/// from `/api/snapshot` instead.
async fn api_events(
    State(shared): State<Shared>,
    Extension(connection): Extension<Connection>,
) -> Response {
    let Some(place) = connection.stream() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "30")],
            format!(
                "too many live event streams (at most {MAX_STREAMS}, {MAX_STREAMS_PER_ADDRESS} \
                 per address): the page refreshes from /api/snapshot instead\n"
            ),
        )
            .into_response();
    };
    let updates = shared.updates.subscribe();
    // The stream holds its place in the budget until the page goes.
    let stream =
        futures_util::stream::unfold((updates, place), |(mut updates, place)| async move {
            loop {
                match updates.recv().await {
                    Ok(data) => {
                        return Some((
                            Ok::<_, Infallible>(SseEvent::default().data(data)),
                            (updates, place),
                        ));
                    }
                    // A slow page skips what it missed: the next event is whole.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Every second: a snapshot, kept as a sample and sent to the open pages.
async fn sampler(shared: Shared) {
    let mut every = tokio::time::interval(SAMPLE_EVERY);
    loop {
        every.tick().await;
        // None: no actor now (a replica that does not lead, for now): no sample this second.
        // With no page listening, only what the history needs (a cluster's dashboard that
        // nobody looks at costs the scheduler little).
        let listening = shared.updates.receiver_count() > 0;
        let taken = match listening {
            true => snapshot(&shared.events).await,
            false => ask(&shared.events, View::Sample).await,
        };
        let Some(snapshot) = taken else {
            continue;
        };
        let point = sample(&snapshot);
        if let Ok(mut history) = shared.history.lock() {
            if history.len() == HISTORY {
                history.pop_front();
            }
            history.push_back(point.clone());
        }
        if let Ok(mut scaling) = shared.scaling.lock() {
            scaling.observe(point.t, &snapshot);
        }
        // Only a whole snapshot goes to pages (one that opened meanwhile waits a second).
        if listening
            && shared.updates.receiver_count() > 0
            && let Ok(data) = serde_json::to_string(&serde_json::json!({
                "snapshot": summarized(&snapshot, true),
                "sample": &point,
            }))
        {
            let _ = shared.updates.send(data);
        }
    }
}
