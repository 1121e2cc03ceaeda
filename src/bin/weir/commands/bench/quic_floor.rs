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

/// The scheduler's idle timeout and keep-alive on its default settings (the slowest idle pace,
/// 60 s, plus one 5 s heartbeat timeout for the keep-alive, two for the timeout; worked out in
/// `scheduler::run_with`). They are timers and allocate nothing: other settings would hold the
/// same memory per connection.
const IDLE: Duration = Duration::from_secs(70);
const KEEP_ALIVE: Duration = Duration::from_secs(65);

/// How long opening every bare connection may take, and the child to end once told.
const OPENING_LIMIT: Duration = Duration::from_secs(300);
const ENDING_LIMIT: Duration = Duration::from_secs(10);

/// The child's side (`weir bench --bare-quic-server DIR`): listen on loopback with the
/// scheduler's transport, write an access file into `dir`, say `ready` on stdout, and hold every
/// connection (and its one stream) until it closes; end when stdin closes. On one
/// current-thread runtime, as the scheduler runs on its default `--threads 1`.
pub(super) async fn serve(dir: &Path) -> Result<()> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(serve_on(&dir))
    })
    .await?
}

async fn serve_on(dir: &Path) -> Result<()> {
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
            open(&endpoint, address).await
        });
    }
    let mut held = Vec::with_capacity(connections as usize);
    let opened = tokio::time::timeout(OPENING_LIMIT, async {
        while let Some(opened) = opening.join_next().await {
            held.push(opened.context("a bare connection's task")??);
        }
        anyhow::Ok(())
    })
    .await;
    match opened {
        Ok(result) => result?,
        Err(_) => bail!(
            "only {} of {connections} bare connections opened in {} s",
            held.len(),
            OPENING_LIMIT.as_secs()
        ),
    }
    // Every connection has had its byte echoed: the server holds each, and its stream, now.
    let after = memory(pid, "VmRSS:");
    for (connection, _, _) in &held {
        connection.close(0u32.into(), b"measured");
    }
    drop(held);
    drop(child.stdin.take());
    if tokio::time::timeout(ENDING_LIMIT, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    Ok(after.saturating_sub(before) as f64 / 1024.0 / f64::from(connections))
}

/// One bare connection with a byte echoed on its stream, tried again (as the simulated peers
/// are) while the server is busy with the others' handshakes.
async fn open(
    endpoint: &quinn::Endpoint,
    address: std::net::SocketAddr,
) -> Result<(quinn::Connection, quinn::SendStream, quinn::RecvStream)> {
    super::tried_again("bare connection", || async {
        let connection = endpoint.connect(address, net::tls::SERVER_NAME)?.await?;
        let (mut send, mut recv) = connection.open_bi().await?;
        send.write_all(&[1]).await?;
        let mut byte = [0u8; 1];
        recv.read_exact(&mut byte).await?;
        Ok((connection, send, recv))
    })
    .await
}

/// The row beside the scheduler's: KiB per peer of the bare server and of the scheduler, and
/// what weir adds (or why the floor could not be measured: the rows before it stand).
pub(super) fn row(report: &mut Report, peers: u32, bare: &Result<f64>, scheduler: f64) {
    report.row(match bare {
        Ok(bare) => format!(
            "| {peers} | {bare:.1} | {scheduler:.1} | {:.1} |",
            scheduler - bare
        ),
        Err(error) => format!("| {peers} | not measured: {error:#} | {scheduler:.1} | |"),
    });
}
