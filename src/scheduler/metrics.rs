//! `scheduler --metrics ADDR`: the Prometheus text format over a minimal HTTP/1.0 server
//! (`GET /metrics` only). The text is rendered by the actor, so it is one consistent snapshot.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::Event;

/// Upper bounds (seconds) of the policy call latency histogram.
pub const BUCKETS: [f64; 10] = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

#[derive(Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(&mut self.counts) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}\n{name}_sum {}\n{name}_count {}",
            self.count, self.sum, self.count
        );
    }
}

/// Serve until the process ends.
pub async fn serve(listener: TcpListener, events: mpsc::UnboundedSender<Event>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let events = events.clone();
        tokio::spawn(async move {
            let mut request = vec![0u8; 4096];
            let mut read = 0;
            // Read the request head (bounded); the body, if any, is ignored.
            while read < request.len() {
                match tokio::time::timeout(
                    Duration::from_secs(5),
                    stream.read(&mut request[read..]),
                )
                .await
                {
                    Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => read += n,
                }
                if request[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&request[..read]);
            let response = if head.starts_with("GET /metrics ") {
                let (reply, text) = oneshot::channel();
                if events.send(Event::Metrics { reply }).is_err() {
                    return;
                }
                let Ok(body) = text.await else { return };
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.0 404 Not Found\r\nContent-Length: 22\r\n\r\ntry GET /metrics only\n"
                    .to_string()
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

pub async fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).await
}
