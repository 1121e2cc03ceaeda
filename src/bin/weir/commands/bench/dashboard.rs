//! `weir bench --simulated-workers N --simulated-dashboard`: the dashboard's answers timed with
//! the simulated cluster registered (the page itself is measured in Chromium by
//! `tests/dashboard.rs`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Report;

/// The dashboard's answers with `n` workers: the median of 5 of each, and its size.
pub(super) async fn rows(url: &str, n: u32, report: &mut Report) -> Result<()> {
    let address = (url.strip_prefix("http://"))
        .and_then(|rest| rest.split('/').next())
        .context("the dashboard's URL")?
        .to_string();
    report.row(String::new());
    report.row(format!(
        "Dashboard with {n} workers (median of 5; size of one answer):"
    ));
    report.row(String::new());
    report.row("| request | ms | KiB |".into());
    report.row("|---|---:|---:|".into());
    for (path, stream) in [
        ("/api/snapshot", false),
        ("/api/events (one event)", true),
        ("/api/workers?limit=50&sort=busy", false),
        ("/api/workers?limit=50&q=nothing-matches", false),
        ("/api/stream?seconds=300", false),
        ("/api/scaling", false),
        ("/api/allocations", false),
    ] {
        let path = path.split(' ').next().unwrap_or(path);
        let mut times = Vec::new();
        let mut size = 0;
        for _ in 0..5 {
            let asked = Instant::now();
            size = http_get(&address, path, stream).await?;
            times.push(asked.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let label = if stream {
            "/api/events (one event)"
        } else {
            path
        };
        report.row(format!(
            "| `{label}` | {:.1} | {:.1} |",
            times[2],
            size as f64 / 1024.0
        ));
    }
    Ok(())
}

/// GET `path` from the dashboard; the body's size (for an event stream, its first event's).
async fn http_get(address: &str, path: &str, first_event: bool) -> Result<usize> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut bytes = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buffer))
            .await
            .context("the dashboard did not answer within 30 s")??;
        if read == 0 {
            break;
        }
        bytes.extend_from_slice(&buffer[..read]);
        if first_event {
            // The head, then one event ("data: ...\n\n").
            let text = String::from_utf8_lossy(&bytes);
            if let Some(body) = text.split_once("\r\n\r\n").map(|(_, b)| b)
                && let Some(at) = body.find("data:")
                && body[at..].contains("\n\n")
            {
                return Ok(body[at..].find("\n\n").unwrap_or(0));
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("{path}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.len())
}
