//! The scheduler's HTTP side (feature `http`, on by default): `--metrics` (`GET /metrics`) and
//! `--dashboard`, served by axum on hyper connection by connection (`http.rs`). Built without
//! the feature, the scheduler refuses those two flags.

mod dashboard;
mod http;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
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

/// OpenMetrics to a scraper that asks for it (Prometheus does), the classic text format
/// otherwise (`curl`, `promtool check metrics`).
async fn metrics(State(events): State<Front>, headers: HeaderMap) -> Response {
    let (reply, text) = oneshot::channel();
    if events.send(Event::Metrics { reply }).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let Ok(body) = text.await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let openmetrics = (headers.get_all(header::ACCEPT).iter())
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    match openmetrics {
        true => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        false => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            super::metrics::classic(&body),
        )
            .into_response(),
    }
}
