//! The floor under the scheduler's memory per peer: what quinn, rustls and tokio hold for an
//! idle QUIC connection with nothing of weir's on it.
//!
//! `weir bench --simulated-workers N` also opens the same number of connections (N workers and
//! their managers) to a child process that only accepts them — the scheduler's TLS and
//! transport settings, one stream each, a byte each way, then nothing — and reads that
//! process's resident memory as the scheduler's is read. What the scheduler holds per peer
//! above this floor is weir's own (its link, its session task, the core's records); the floor
//! itself is the transport's, and is the same whatever weir does.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use weir::net::{self, AccessFile};

use super::Report;
use super::cluster::memory;

/// Connections per client endpoint and opened at once, as the simulated fleet does.
const PER_ENDPOINT: usize = 100;
const CONNECTING: usize = 128;

/// The scheduler's own idle timeout and keep-alive on default settings (a 60 s idle pace plus
/// two 5 s heartbeat timeouts; the keep-alive one timeout earlier): neither allocates, but the
/// floor is measured on the settings the scheduler runs with.
const IDLE: Duration = Duration::from_secs(70);
const KEEP_ALIVE: Duration = Duration::from_secs(65);

/// The child's side (`weir bench --bare-quic-server DIR`): listen on loopback with the
/// scheduler's transport, write an access file into `dir`, say `ready` on stdout, and hold every
/// connection (and its one stream) until it closes; end when stdin closes.
pub(super) async fn serve(dir: &Path) -> Result<()> {
    let (cert, key) = net::tls::generate()?;
    let mut server = net::tls::server_config(&cert, &key)?;
    server.transport_config(net::server_transport(IDLE, KEEP_ALIVE));
    let udp = net::udp::HostUdp;
    let listening = net::udp::Udp::listen(&udp, "127.0.0.1:0".parse()?)?;
    let endpoint = net::udp::endpoint(&udp, listening, Some(server))?;
    let access = AccessFile {
        address: format!("quic://{}", endpoint.local_addr()?),
        certificate: cert,
        ..Default::default()
    };
    access.write(&dir.join("access.json"))?;
    println!("ready");
    let held = async {
        while let Some(incoming) = endpoint.accept().await {
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else {
                    return;
                };
                let Ok((mut send, mut recv)) = connection.accept_bi().await else {
                    return;
                };
                let mut byte = [0u8; 1];
                if recv.read_exact(&mut byte).await.is_err() || send.write_all(&byte).await.is_err()
                {
                    return;
                }
                // Held as a session holds its link, until the peer goes.
                connection.closed().await;
                drop((send, recv));
            });
        }
    };
    let mut stdin = tokio::io::stdin();
    let mut rest = Vec::new();
    tokio::select! {
        () = held => {}
        _ = stdin.read_to_end(&mut rest) => {}
    }
    Ok(())
}

/// Open `connections` idle connections to a bare server (a child process of this one) and
/// return its resident memory per connection, in KiB.
pub(super) async fn floor(connections: u32, dir: &Path) -> Result<f64> {
    let sub = dir.join(format!("bare-quic-{connections}"));
    std::fs::create_dir_all(&sub)?;
    let exe = std::env::current_exe().context("this executable's path")?;
    let mut child = tokio::process::Command::new(exe)
        .arg("bench")
        .arg("--bare-quic-server")
        .arg(&sub)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the bare QUIC server")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).await?;
    if line.trim() != "ready" {
        bail!("the bare QUIC server did not start (it said {line:?})");
    }
    let pid = child.id().context("the bare QUIC server's pid")?;
    let access = AccessFile::read(&sub.join("access.json"))?;
    let address = net::parse_address(&access.address)?;
    let endpoints: Vec<quinn::Endpoint> = (0..(connections as usize).div_ceil(PER_ENDPOINT).max(1))
        .map(|_| net::client_endpoint(&access, net::PEER_IDLE_TIMEOUT))
        .collect::<Result<_, _>>()?;
    let before = memory(pid, "VmRSS:");
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let mut opening = JoinSet::new();
    for n in 0..connections as usize {
        let (endpoint, gate) = (endpoints[n % endpoints.len()].clone(), gate.clone());
        opening.spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let connection = endpoint.connect(address, net::tls::SERVER_NAME)?.await?;
            let (mut send, mut recv) = connection.open_bi().await?;
            send.write_all(&[1]).await?;
            let mut byte = [0u8; 1];
            recv.read_exact(&mut byte).await?;
            anyhow::Ok((connection, send, recv))
        });
    }
    let mut held = Vec::with_capacity(connections as usize);
    while let Some(opened) = opening.join_next().await {
        held.push(opened.context("a bare connection's task")??);
    }
    // Every connection has had its byte echoed: the server holds each, and its stream, now.
    let after = memory(pid, "VmRSS:");
    for (connection, _, _) in &held {
        connection.close(0u32.into(), b"measured");
    }
    drop(held);
    drop(child.stdin.take());
    let _ = child.wait().await;
    Ok(after.saturating_sub(before) as f64 / 1024.0 / f64::from(connections))
}

/// The row beside the scheduler's: KiB per peer of the bare server and of the scheduler, and
/// what weir adds.
pub(super) fn row(report: &mut Report, peers: u32, bare: f64, scheduler: f64) {
    report.row(format!(
        "| {peers} | {bare:.1} | {scheduler:.1} | {:.1} |",
        scheduler - bare
    ));
}
