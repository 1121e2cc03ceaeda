//! `scheduler --dashboard`: the page in a real browser. Headless Chromium is driven over the
//! DevTools protocol while a cluster of two tiers takes a burst and an environment is
//! registered; the page follows the live event stream, nothing reloads it. Ignored in a plain
//! `cargo test` (it needs Debian's `chromium`); CI installs Chromium and runs it. Leaves a
//! screenshot at `$CARGO_TARGET_DIR/dashboard.png`.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::Cluster;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// A screenshot of the page as it is, checked not to be blank (a blank page is ~5 KB).
fn shot(page: &mut Browser, path: &Path) {
    page.screenshot(path);
    let size = std::fs::metadata(path).unwrap().len();
    assert!(
        size > 10_000,
        "{}: {size} bytes, a blank page",
        path.display()
    );
}

fn chromium() -> PathBuf {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .map(|name| Path::new("/usr/bin").join(name))
        .find(|path| path.exists())
        .expect("NOT RUN: no Chromium (apt-get install chromium); CI installs it")
}

/// A headless Chromium with one page, driven over the DevTools protocol.
struct Browser {
    child: Child,
    socket: WebSocket<TcpStream>,
    session: String,
    next: u64,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    fn open(url: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let endpoint = loop {
            let mut line = String::new();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "chromium ended");
            if let Some(at) = line.find("ws://") {
                break line[at..].trim().to_string();
            }
        };
        // Keep reading its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in stderr.lines() {});
        let host = endpoint["ws://".len()..].split('/').next().unwrap();
        let stream = TcpStream::connect(host).expect("DevTools answers");
        // A browser that stops answering fails the test (a timed-out read) instead of hanging it.
        stream
            .set_read_timeout(Some(common::deadline()))
            .expect("a read timeout");
        let (socket, _) =
            tungstenite::client(endpoint.as_str(), stream).expect("DevTools connects");
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next: 0,
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({ "url": url }));
        let attached = browser.call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_string();
        browser
    }

    /// One DevTools command; its result (events that arrive meanwhile are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let mut message = json!({ "id": self.next, "method": method, "params": params });
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .unwrap();
        loop {
            let Message::Text(text) = self.socket.read().unwrap() else {
                continue;
            };
            let reply: Value = serde_json::from_str(&text).unwrap();
            if reply["id"] == json!(self.next) {
                assert!(reply["error"].is_null(), "{method}: {reply}");
                return reply["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        result["result"]["value"].clone()
    }

    /// Poll the page until `expression` is true (the page updates from its event stream).
    fn until(&mut self, expression: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.eval(expression) != json!(true) {
            let text = self.eval("document.body.innerText");
            assert!(
                Instant::now() < deadline,
                "{what}: never true: {expression}\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({ "format": "png" }));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
}

#[test]
#[ignore = "needs Debian's chromium (apt-get install chromium): CI runs it"]
fn the_dashboard_shows_tiers_a_burst_and_verdicts_in_a_browser() {
    let mut cluster = Cluster::with_policy(
        "waterfall_v2",
        "1, fast\n2, slow",
        &["--dashboard", "127.0.0.1:0"],
    );
    cluster.dynamic_manager("first", "fast", 2);
    cluster.dynamic_manager("second", "slow", 2);
    cluster.await_managers(2);
    let url = cluster.dashboard.clone().expect("the dashboard's URL");
    let mut page = Browser::open(&url);

    // Both managers, each under its tier, and the stream is live.
    page.until(
        "!!document.querySelector('tr[data-manager=first]') && \
         !!document.querySelector('tr[data-manager=second]')",
        "both managers shown",
    );
    page.until(
        "document.getElementById('live').textContent === 'live'",
        "the event stream open",
    );
    let text = page.eval("document.getElementById('managers').innerText");
    let text = text.as_str().unwrap();
    assert!(
        text.find("tier 1").unwrap() < text.find("first").unwrap()
            && text.find("tier 2").unwrap() < text.find("second").unwrap(),
        "{text}"
    );
    let samples = |page: &mut Browser| {
        page.eval("Number(document.getElementById('chart').dataset.samples)")
            .as_u64()
            .unwrap()
    };
    let before = samples(&mut page);

    // A burst fills the first tier and spills into the second: the chart's series grow.
    cluster.json(&["submit", "--count", "8", "--", "sleep", "3"]);
    page.until(
        "Number(document.getElementById('chart').dataset.peakTasks) >= 8",
        "the burst in the chart",
    );
    page.until(
        "Number(document.getElementById('chart').dataset.peakWorkers) >= 2",
        "workers of both tiers in the chart",
    );
    assert!(samples(&mut page) > before);
    page.until(
        "/tier 1: [1-9]/.test(document.getElementById('managers').innerText) && \
         /tier 2: [1-9]/.test(document.getElementById('managers').innerText)",
        "live workers in both tiers",
    );
    // Each manager's units (`weir managers`): the first tier's worker processes run.
    page.until(
        "/[1-9] running/.test(document.querySelector('tr[data-manager=first] td.units').textContent)",
        "the first manager's units running",
    );
    let screenshot = Path::new(env!("CARGO_BIN_EXE_scheduler"))
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("dashboard.png");
    page.screenshot(&screenshot);
    assert!(std::fs::metadata(&screenshot).unwrap().len() > 10_000);

    // An environment registered now shows its verdicts, per manager.
    cluster.env_register("big", "mem_gt", "threshold=1");
    page.until(
        "!!document.querySelector('tr[data-environment=big]') && \
         document.querySelector('tr[data-environment=big]').innerText.includes('✓')",
        "the verdicts of `big`",
    );

    // A failing task shows in its job's row.
    cluster.json(&["submit", "--retries", "0", "--", "false"]);
    page.until(
        "[...document.querySelectorAll('#jobs tbody tr')].some((r) => r.cells[5].textContent === '1')",
        "the failed task counted in the jobs table",
    );
    let shots = screenshot.parent().unwrap().to_path_buf();

    // The failed job's page: its failure with what went wrong and where it ran.
    cluster.json(&[
        "submit",
        "--retries",
        "0",
        "--",
        "sh",
        "-c",
        "echo no input >&2; exit 3",
    ]);
    page.until(
        "!!document.querySelector('#jobs tr[data-job=\"3\"] a')",
        "the new job listed",
    );
    page.eval("document.querySelector('#jobs tr[data-job=\"3\"] a').click()");
    page.until(
        "document.body.dataset.shown === 'job' && \
         document.getElementById('job-failures').innerText.includes('exit code 3: no input')",
        "the job page with the failure's error",
    );
    assert!(
        page.eval("document.getElementById('job-places').innerText")
            .as_str()
            .unwrap()
            .contains("worker first-"),
        "where it ran"
    );
    shot(&mut page, &shots.join("dashboard-job.png"));

    // The task stream: every run so far on its worker's lanes, the failed ones marked; hovering
    // a run names its task, clicking explains it.
    page.eval("location.hash = '#stream'");
    page.until(
        "Number(document.getElementById('stream-canvas').dataset.runs) >= 9 && \
         Number(document.getElementById('stream-canvas').dataset.failed) === 2",
        "the burst's runs and the two failed ones in the task stream",
    );
    page.eval(
        "const c = document.getElementById('stream-canvas'), b = streamBoxes[0], \
         r = c.getBoundingClientRect(), at = { clientX: r.left + b.x0 + 1, clientY: r.top + b.y0 + 5 }; \
         c.dispatchEvent(new MouseEvent('mousemove', at)); c.dispatchEvent(new MouseEvent('click', at))",
    );
    let tip = page.eval("document.getElementById('stream-tip').textContent");
    assert!(tip.as_str().unwrap().starts_with("task "), "{tip}");
    page.until(
        "/^task [0-9]+/.test(document.getElementById('stream-explain').textContent)",
        "the clicked run's task explained",
    );
    shot(&mut page, &shots.join("dashboard-stream.png"));

    // Workers: every worker a row (a page of them), with what it runs and its verdicts.
    cluster.json(&["submit", "--count", "4", "--", "sleep", "5"]);
    page.eval("location.hash = '#workers'");
    page.until(
        "document.body.dataset.shown === 'workers' && \
         [...document.querySelectorAll('#workers tbody tr')].some((r) => /^[1-9]/.test(r.cells[4].textContent))",
        "a worker row with the tasks it runs",
    );
    let rows = page.eval("document.querySelectorAll('#workers tbody tr[data-worker]').length");
    assert!(rows.as_u64().unwrap() >= 2, "{rows}");
    assert_eq!(
        page.eval(
            "document.querySelector('#workers tbody tr').cells[9].textContent.includes('big ✓')"
        ),
        json!(true),
        "the worker's verdicts"
    );
    // Filtered by the scheduler: only the first manager's workers.
    page.eval(
        "const f = document.getElementById('worker-filter'); f.value = 'first'; \
         f.dispatchEvent(new Event('input'))",
    );
    page.until(
        "[...document.querySelectorAll('#workers tbody tr')].length > 0 && \
         [...document.querySelectorAll('#workers tbody tr')].every((r) => r.cells[1].textContent === 'first')",
        "the filter applied",
    );
    shot(&mut page, &shots.join("dashboard-workers.png"));

    // Scaling: the demand, a small chart per manager and the log of decisions that grew them.
    cluster.json(&["submit", "--count", "6", "--", "sleep", "30"]);
    page.eval("location.hash = '#scaling'");
    page.until(
        "[...document.querySelectorAll('#demand tbody tr')].some((r) => r.cells.length > 2 && Number(r.cells[1].textContent) + Number(r.cells[2].textContent) === 6)",
        "the demand table",
    );
    page.until(
        "Number(document.getElementById('multiples').dataset.managers) === 2 && \
         !!document.querySelector('#log tr[data-manager=first]') && \
         !!document.querySelector('#log tr[data-manager=second]')",
        "per-manager charts and the decision log",
    );
    // Both tiers at their cap of 2, 4 of the 6 running: the 2 queued are unserved.
    page.until(
        "[...document.querySelectorAll('#demand tbody tr')].some((r) => r.dataset.unserved === 'true' && \
         r.cells[1].textContent === '2' && r.cells[5].textContent.includes('0 below their cap'))",
        "the queued tasks no manager offers room for, marked unserved",
    );
    let grew = page.eval("document.querySelector('#log tr[data-manager=second]').innerText");
    assert!(grew.as_str().unwrap().contains("→"), "{grew}");
    shot(&mut page, &shots.join("dashboard-scaling.png"));

    // Allocations: each manager's units.
    page.eval("location.hash = '#allocations'");
    page.until(
        "!!document.querySelector('#allocations tr[data-manager=first]') && \
         !!document.querySelector('#allocations tr[data-manager=second]')",
        "both managers' units",
    );
    shot(&mut page, &shots.join("dashboard-allocations.png"));
}

#[test]
fn the_dashboard_beyond_loopback_asks_for_the_token() {
    // 0.0.0.0 is "beyond loopback" for the rule; the test still only connects to 127.0.0.1.
    let cluster = Cluster::start_with(&["--dashboard", "0.0.0.0:0"]);
    let url = cluster.dashboard.clone().unwrap();
    let (base, token) = url
        .split_once("?token=")
        .expect("the URL carries the token");
    // It is the read-only token: it may show the cluster, not submit to it.
    let access = weir::net::AccessFile::read(&cluster.access_file()).unwrap();
    assert_eq!(token, access.read_token);
    assert_ne!(token, access.client_token);
    let port = base.rsplit(':').next().unwrap().trim_end_matches('/');
    let local = format!("http://127.0.0.1:{port}/");
    let address = format!("127.0.0.1:{port}");
    let get = |path: &str, host: &str| common::http_request(&address, path, host);
    for path in ["/api/snapshot", "/api/history", "/api/events", "/metrics"] {
        assert!(get(path, "x").starts_with("HTTP/1.0 401"), "{local}{path}");
    }
    assert!(get("/api/snapshot?token=wrong", "x").starts_with("HTTP/1.0 401"));
    assert!(get(&format!("/api/snapshot?token={token}"), "x").starts_with("HTTP/1.0 200"));
    // The page and its scripts load without the token (a browser fetches them without the
    // page's query) and do not carry it: the page reads it from its own URL.
    for path in ["/", "/common.js", "/views.js", "/app.js", "/uplot.min.js"] {
        let page = get(path, "x");
        assert!(
            page.starts_with("HTTP/1.0 200") && !page.contains(token),
            "{path}"
        );
    }
}

#[test]
fn the_dashboard_on_loopback_answers_only_to_loopback_names() {
    let cluster = Cluster::start_with(&["--dashboard", "127.0.0.1:0"]);
    let url = cluster.dashboard.clone().unwrap();
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let get = |host: &str| common::http_request(address, "/api/snapshot", host);
    // A name a web page elsewhere pointed at 127.0.0.1 (DNS rebinding) is refused.
    assert!(get("attacker.example:80").starts_with("HTTP/1.0 421"));
    for host in [address, "localhost:1", "[::1]:1"] {
        assert!(get(host).starts_with("HTTP/1.0 200"), "{host}");
    }
}

#[test]
#[ignore = "needs Debian's chromium (apt-get install chromium): CI runs it"]
fn the_page_beyond_loopback_works_from_the_printed_url() {
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, fast", &["--dashboard", "0.0.0.0:0"]);
    cluster.dynamic_manager("first", "fast", 2);
    cluster.await_managers(1);
    let url = cluster.dashboard.clone().unwrap();
    // The printed URL names the bound address; this test reaches it on loopback only.
    let url = url.replace("0.0.0.0", "127.0.0.1");
    let mut page = Browser::open(&url);
    page.until(
        "!!document.querySelector('tr[data-manager=first]')",
        "the manager shown",
    );
    page.until(
        "document.getElementById('live').textContent === 'live'",
        "the event stream open with the token",
    );
}

#[test]
fn connections_that_never_send_a_request_do_not_hold_the_dashboard() {
    use std::io::{Read, Write};
    let cluster = Cluster::start_with(&["--dashboard", "127.0.0.1:0"]);
    let url = cluster.dashboard.clone().unwrap();
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    // More half-sent requests than the server keeps connections (256).
    let stalled: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut stream = TcpStream::connect(&address).unwrap();
            stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
            stream
        })
        .collect();
    // Each is closed by the server (its head never completes), not kept for ever.
    for mut stream in stalled {
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut rest = Vec::new();
        let closed = match stream.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
        };
        assert!(closed, "a stalled connection was kept");
    }
    // And the dashboard answers again.
    let body = common::http_get(&format!("{url}api/snapshot"));
    assert!(body.contains("\"status\""), "{body}");
}

/// A hostile client on this machine: `connections` connections to `address`, each sending
/// `request` every `every` (once, if `None`) and reading all that comes back; one the server
/// closes is opened again a second later. Stops when dropped.
struct Hog {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    opened: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    answered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Hog {
    fn start(address: &str, connections: usize, request: String, every: Option<Duration>) -> Hog {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let opened = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let (address, counts) = (address.to_string(), (opened.clone(), answered.clone()));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                for _ in 0..connections {
                    let (address, request) = (address.clone(), request.clone());
                    let (opened, answered) = counts.clone();
                    tokio::spawn(async move {
                        loop {
                            if let Ok(stream) = tokio::net::TcpStream::connect(&address).await {
                                opened.fetch_add(1, Ordering::Relaxed);
                                let (mut read, mut write) = stream.into_split();
                                let reading = async {
                                    let mut buffer = vec![0; 1 << 16];
                                    while let Ok(n @ 1..) = read.read(&mut buffer).await {
                                        if buffer[..n].starts_with(b"HTTP/1.1 200") {
                                            answered.fetch_add(1, Ordering::Relaxed);
                                        }
                                    }
                                };
                                let writing = async {
                                    while write.write_all(request.as_bytes()).await.is_ok() {
                                        match every {
                                            Some(every) => tokio::time::sleep(every).await,
                                            None => std::future::pending().await,
                                        }
                                    }
                                };
                                tokio::select! {
                                    () = reading => {}
                                    () = writing => {}
                                }
                            }
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    });
                }
                let _ = stopped.await;
            });
        });
        let hog = Hog {
            stop: Some(stop),
            thread: Some(thread),
            opened,
            answered,
        };
        // Every connection open (once) before anything is judged.
        let deadline = Instant::now() + Duration::from_secs(30);
        while hog.opened.load(Ordering::Relaxed) < connections {
            assert!(
                Instant::now() < deadline,
                "the hog could not open its connections"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        hog
    }

    /// Responses that began with `200 OK` (roughly: counted at the start of a read).
    fn answered(&self) -> usize {
        self.answered.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A newcomer's `GET /` (HTTP/1.0, `Host: host`) on `address`: answered whole, 200, within 2 s.
fn a_newcomer_is_served(address: &str, host: &str) {
    use std::io::{Read, Write};
    let start = Instant::now();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let _ = write!(stream, "GET / HTTP/1.0\r\nHost: {host}\r\n\r\n");
    let mut response = Vec::new();
    let ended = stream.read_to_end(&mut response);
    let took = start.elapsed();
    let head = String::from_utf8_lossy(&response[..response.len().min(80)]).into_owned();
    assert!(
        ended.is_ok() && head.starts_with("HTTP/1.0 200") && took < Duration::from_secs(2),
        "a newcomer's GET / after {took:?}: {ended:?}, {head:?}"
    );
}

#[test]
fn keep_alive_connections_from_one_address_cannot_lock_out_a_newcomer() {
    let cluster = Cluster::start_with(&["--dashboard", "127.0.0.1:0"]);
    let url = cluster.dashboard.clone().unwrap();
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    // More connections than the server keeps (256), all from 127.0.0.1 like the newcomer, each
    // asking for the page's script (no token needed) every 8 s to stay busy enough.
    let request = format!("GET /app.js HTTP/1.1\r\nHost: {address}\r\n\r\n");
    let hog = Hog::start(address, 300, request, Some(Duration::from_secs(8)));
    // Newcomers over more than one round of the hog's requests.
    for _ in 0..5 {
        a_newcomer_is_served(address, address);
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        hog.answered() >= 256,
        "the hog was served: {}",
        hog.answered()
    );
}

/// An event (every second, to every open page) carries each manager once, in
/// `status.managers`, with only its id and units counted beside it; the units themselves and
/// the worker lists are asked for by the views that show them.
#[test]
fn an_event_carries_each_manager_once_and_its_units_only_counted() {
    use std::io::{Read, Write};
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, fast", &["--dashboard", "127.0.0.1:0"]);
    cluster.dynamic_manager("first", "fast", 2);
    cluster.await_managers(1);
    let done = cluster.json(&["submit", "--count", "2", "--wait", "--", "true"]);
    assert_eq!(done["counts"]["succeeded"], 2, "{done}");
    let url = cluster.dashboard.clone().unwrap();
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /api/events HTTP/1.0\r\nHost: {address}\r\n\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 4096];
    let event = loop {
        let read = stream.read(&mut buffer).unwrap();
        assert!(read > 0, "the stream ended before an event");
        bytes.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(at) = text.find("data:")
            && let Some(end) = text[at..].find("\n\n")
        {
            break text[at + 5..at + end].trim().to_string();
        }
    };
    let event: Value = serde_json::from_str(&event).unwrap();
    let snapshot = &event["snapshot"];
    assert_eq!(
        snapshot["status"]["managers"][0]["id"], "first",
        "{snapshot}"
    );
    assert_eq!(snapshot["status"]["workers"], serde_json::json!([]));
    let managers = snapshot["managers"].as_array().unwrap();
    assert_eq!(managers.len(), 1, "{snapshot}");
    let keys: Vec<&String> = managers[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["id", "unit_counts"], "{snapshot}");
    let counted: u64 = (managers[0]["unit_counts"].as_object().unwrap().values())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(counted >= 1, "{snapshot}");
    // The Allocations view asks for the units themselves.
    let answer = common::http_request(address, "/api/allocations", address);
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    let allocations: Value = serde_json::from_str(body).unwrap();
    assert_eq!(allocations[0]["id"], "first", "{allocations}");
    // (Not compared with the count: a unit may start or end between the two answers.)
    let units = allocations[0]["units"].as_array().unwrap();
    assert!(!units.is_empty(), "{allocations}");
    assert!(
        units
            .iter()
            .all(|u| u["id"].is_string() && u["state"].is_string()),
        "{allocations}"
    );
}

#[test]
fn event_streams_cannot_lock_out_a_newcomer() {
    use std::io::{Read, Write};
    // Beyond loopback, with the token: the streams are a client's who has it.
    let cluster = Cluster::start_with(&["--dashboard", "0.0.0.0:0"]);
    let url = cluster.dashboard.clone().unwrap();
    let (base, token) = url.split_once("?token=").unwrap();
    let port = base.rsplit(':').next().unwrap().trim_end_matches('/');
    let address = format!("127.0.0.1:{port}");
    let request = format!("GET /api/events?token={token} HTTP/1.1\r\nHost: x\r\n\r\n");
    let hog = Hog::start(&address, 256, request, None);
    for _ in 0..5 {
        a_newcomer_is_served(&address, "x");
        std::thread::sleep(Duration::from_secs(2));
    }
    // Some streams were given (the stream budget), not none; past it this address is refused
    // one at once, with the reason (not left to hang).
    assert!(hog.answered() > 0);
    let mut stream = TcpStream::connect(&address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /api/events?token={token} HTTP/1.0\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let mut refused = String::new();
    stream.read_to_string(&mut refused).unwrap();
    assert!(
        refused.starts_with("HTTP/1.0 503") && refused.contains("too many live event streams"),
        "{refused}"
    );
    let snapshot = common::http_request(&address, &format!("/api/snapshot?token={token}"), "x");
    assert!(snapshot.starts_with("HTTP/1.0 200"), "{snapshot}");
}

#[test]
#[ignore = "needs Debian's chromium (apt-get install chromium): CI runs it"]
fn a_page_refused_a_live_stream_refreshes_itself() {
    let mut cluster =
        Cluster::with_policy("waterfall_v2", "1, fast", &["--dashboard", "127.0.0.1:0"]);
    cluster.dynamic_manager("first", "fast", 2);
    cluster.await_managers(1);
    let url = cluster.dashboard.clone().unwrap();
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    // Every stream this address may have, held open: the browser's is refused.
    let request = format!("GET /api/events HTTP/1.1\r\nHost: {address}\r\n\r\n");
    let streams = Hog::start(address, 8, request, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while streams.answered() < 8 {
        assert!(
            Instant::now() < deadline,
            "8 streams: {}",
            streams.answered()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut page = Browser::open(&url);
    page.until(
        "document.getElementById('live').textContent === 'refreshing every 5 s'",
        "the page says it refreshes instead",
    );
    page.until(
        "!!document.querySelector('tr[data-manager=first]')",
        "the manager shown",
    );
    // What changes later shows without a stream.
    cluster.dynamic_manager("second", "fast", 2);
    page.until(
        "!!document.querySelector('tr[data-manager=second]')",
        "a manager registered later shown",
    );
}

/// The page with thousands of simulated workers (`weir bench --simulated-workers N
/// --simulated-dashboard`): it shows them all, pages them, and how long its first data and its
/// updates take is printed (measured, not asserted: BENCHMARKS.md has 10,000 in release).
/// N is `WEIR_DASHBOARD_WORKERS` (default 2,000), `WEIR_DASHBOARD_WEIR` the `weir` to run.
#[test]
#[ignore = "needs Debian's chromium and a minute of simulated workers: CI runs it"]
fn the_page_stays_usable_with_thousands_of_simulated_workers() {
    let n: u32 = std::env::var("WEIR_DASHBOARD_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let weir = std::env::var("WEIR_DASHBOARD_WEIR")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_weir").to_string());
    let mut bench = Command::new(&weir)
        .args(["bench", "--simulated-dashboard", "--idle-secs", "60"])
        .arg("--simulated-workers")
        .arg(n.to_string())
        .arg("--simulated-managers")
        .arg((n / 10).max(1).to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("weir bench starts");
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = BufReader::new(bench.stderr.take().unwrap());
    let mut bench = Kill(bench);
    let (found, url) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("dashboard on ") {
                let _ = found.send(url.to_string());
            }
        }
    });
    let url = url
        .recv_timeout(Duration::from_secs(600))
        .expect("the bench printed the dashboard's URL once its workers registered");
    let opened = Instant::now();
    let mut page = Browser::open(&url);
    page.until(
        &format!("document.getElementById('totals').textContent.startsWith('{n} workers')"),
        "every simulated worker counted",
    );
    let shown = opened.elapsed();
    page.until("weirTimes.updates.length >= 5", "five live updates");
    let times = page.eval("JSON.stringify(weirTimes)");
    page.eval("location.hash = '#workers'");
    let asked = Instant::now();
    page.until(
        &format!("Number(document.getElementById('workers').dataset.total) === {n} && document.querySelectorAll('#workers tbody tr').length === 50"),
        "the first page of workers",
    );
    let paged = asked.elapsed();
    shot(
        &mut page,
        &std::env::temp_dir().join("weir-dashboard-simulated.png"),
    );
    println!(
        "dashboard, {n} simulated workers: data on the page {:.0} ms after opening it \
         (page's own first data at {}), a page of 50 workers in {:.0} ms; times {}",
        shown.as_secs_f64() * 1e3,
        page.eval("Math.round(weirTimes.first) + ' ms'"),
        paged.as_secs_f64() * 1e3,
        times
    );
    let _ = bench.0.kill();
}
