//! The scheduler's HTTP side (feature `http`, on by default): `--metrics` (`GET /metrics`) and
//! `--dashboard`, served by axum on hyper connection by connection (`http.rs`). Built without
//! the feature, the scheduler refuses those two flags.

mod dashboard;
mod http;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::event::{Event, Front};

pub(super) use dashboard::serve as serve_dashboard;

/// `--metrics`: `GET /metrics`, the text the actor renders from one consistent snapshot.
pub(in crate::scheduler) async fn serve_metrics(listener: TcpListener, events: Front) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try GET /metrics\n") })
        .with_state(events);
    http::serve_http(listener, app, "metrics").await;
}

async fn metrics(State(events): State<Front>) -> Response {
    let (reply, text) = oneshot::channel();
    if events.send(Event::Metrics { reply }).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match text.await {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}
