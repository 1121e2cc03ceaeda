//! `scheduler --metrics ADDR`: the Prometheus text format over a minimal HTTP/1.0 server
//! (`GET /metrics` only). The text is rendered by the actor, so it is one consistent snapshot.

use std::collections::BTreeMap;
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

impl super::actor::Actor {
    /// The Prometheus text of `/metrics`.
    pub(super) fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        let status = self.core.status(self.now());
        let mut out = String::new();
        let t = &status.tasks;
        let _ = writeln!(
            out,
            "# HELP weir_tasks Tasks by state.\n# TYPE weir_tasks gauge"
        );
        for (state, n) in [
            ("queued", t.queued),
            ("running", t.running),
            ("succeeded", t.succeeded),
            ("failed", t.failed),
            ("canceled", t.canceled),
        ] {
            let _ = writeln!(out, "weir_tasks{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP weir_jobs_total Jobs accepted.\n# TYPE weir_jobs_total counter"
        );
        let _ = writeln!(out, "weir_jobs_total {}", status.jobs);
        let mut by_manager: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
        for w in &status.workers {
            let entry = by_manager
                .entry(w.manager.clone().unwrap_or_default())
                .or_default();
            entry.0 += 1;
            entry.1 += u64::from(w.slots);
            entry.2 += u64::from(w.running);
        }
        let _ = writeln!(
            out,
            "# HELP weir_workers Live workers by manager (empty: none).\n# TYPE weir_workers gauge"
        );
        for (manager, (n, _, _)) in &by_manager {
            let _ = writeln!(out, "weir_workers{{manager=\"{}\"}} {n}", escape(manager));
        }
        let _ = writeln!(
            out,
            "# HELP weir_slots Task slots of live workers, busy or not.\n# TYPE weir_slots gauge"
        );
        for (manager, (_, slots, busy)) in &by_manager {
            let manager = escape(manager);
            let _ = writeln!(
                out,
                "weir_slots{{manager=\"{manager}\",busy=\"false\"}} {}",
                slots - busy
            );
            let _ = writeln!(
                out,
                "weir_slots{{manager=\"{manager}\",busy=\"true\"}} {busy}"
            );
        }
        let managers = &status.managers;
        let _ = writeln!(
            out,
            "# HELP weir_manager_workers Workers per manager.\n# TYPE weir_manager_workers gauge"
        );
        for m in managers {
            let id = escape(&m.id);
            for (kind, n) in [
                ("desired", m.desired.unwrap_or(0)),
                ("live", m.live),
                ("starting", m.starting),
            ] {
                let _ = writeln!(
                    out,
                    "weir_manager_workers{{manager=\"{id}\",kind=\"{kind}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP weir_manager_online Whether a manager heartbeats.\n# TYPE weir_manager_online gauge"
        );
        for m in managers {
            let _ = writeln!(
                out,
                "weir_manager_online{{manager=\"{}\"}} {}",
                escape(&m.id),
                u8::from(m.online)
            );
        }
        let _ = writeln!(
            out,
            "# HELP weir_manager_fixed_workers Workers a fixed pool keeps (--fixed N).\n# TYPE weir_manager_fixed_workers gauge"
        );
        for m in managers {
            if let Some(n) = m.fixed {
                let _ = writeln!(
                    out,
                    "weir_manager_fixed_workers{{manager=\"{}\"}} {n}",
                    escape(&m.id)
                );
            }
        }
        self.policy_latency.render(
            &mut out,
            "weir_policy_decide_seconds",
            "Time of one sandboxed scaling policy call.",
        );
        let _ = writeln!(
            out,
            "# HELP weir_policy_errors_total Policy calls that failed.\n# TYPE weir_policy_errors_total counter"
        );
        let _ = writeln!(
            out,
            "weir_policy_errors_total {}",
            self.core.policy_errors()
        );
        let _ = writeln!(
            out,
            "# HELP weir_environment_workers Workers per environment verdict.\n# TYPE weir_environment_workers gauge"
        );
        for env in self.core.environment_report(None) {
            let name = escape(&env.name);
            for (verdict, n) in [
                ("match", env.matching.len()),
                ("no_match", env.not_matching.len()),
                ("error", env.erroring.len()),
                ("pending", env.pending.len()),
            ] {
                let _ = writeln!(
                    out,
                    "weir_environment_workers{{environment=\"{name}\",verdict=\"{verdict}\"}} {n}"
                );
            }
        }
        out
    }
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
