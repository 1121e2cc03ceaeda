//! A UDP relay for the network fault tests: it listens on one address and forwards each
//! client's datagrams to one upstream address (the scheduler) from a socket of that client's
//! own, and the answers back, shaped per direction at run time through its handle: a delay with
//! uniform jitter (± around it), a loss probability, a duplication probability, and dropping
//! everything. A delayed datagram leaves at its own deadline: datagrams go out in deadline order
//! (so jitter reorders them, as a real path would). The random draws come from a seeded
//! generator; the seed is printed when the relay starts.

#![allow(dead_code)]

use std::collections::{BinaryHeap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::Rng;

/// Which way a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Direction {
    /// Client to upstream (worker to scheduler).
    Up,
    /// Upstream to client (scheduler to worker).
    Down,
}

/// What happens to the datagrams of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Shape {
    pub delay: Duration,
    /// Each datagram's delay is `delay` ± a uniform draw of up to this (never below zero).
    pub jitter: Duration,
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is sent twice (the copy with its own delay).
    pub duplicate: f64,
    /// Drop every datagram.
    pub drop_all: bool,
}

impl Shape {
    /// Pass everything at once.
    pub(crate) fn clear() -> Shape {
        Shape::default()
    }

    pub(crate) fn delay(delay: Duration, jitter: Duration) -> Shape {
        Shape {
            delay,
            jitter,
            ..Shape::default()
        }
    }

    pub(crate) fn loss(loss: f64) -> Shape {
        Shape {
            loss,
            ..Shape::default()
        }
    }

    pub(crate) fn cut() -> Shape {
        Shape {
            drop_all: true,
            ..Shape::default()
        }
    }
}

/// A datagram waiting for its deadline.
struct Pending {
    at: Instant,
    seq: u64,
    direction: Direction,
    client: SocketAddr,
    bytes: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed: the heap's top is the earliest deadline.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct Counters {
    passed: u64,
    dropped: u64,
    duplicated: u64,
}

struct State {
    up: Shape,
    down: Shape,
    /// Per client address, shapes that replace the direction's own (e.g. cut one client only).
    per_client: HashMap<SocketAddr, (Option<Shape>, Option<Shape>)>,
    rng: Rng,
    seq: u64,
    queue: BinaryHeap<Pending>,
    counters: HashMap<Direction, Counters>,
}

struct Shared {
    listen: UdpSocket,
    upstream: SocketAddr,
    /// Each client's own socket to the upstream, in the order clients were first seen.
    clients: Mutex<Vec<(SocketAddr, Arc<UdpSocket>)>>,
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
    name: String,
}

/// The relay; stopped (its threads joined) on drop.
pub(crate) struct Relay {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    pub address: SocketAddr,
    pub seed: u64,
}

/// A seed from the environment (`WEIR_RELAY_SEED`) or the clock.
pub(crate) fn seed() -> u64 {
    crate::common::seed("WEIR_RELAY_SEED")
}

const POLL: Duration = Duration::from_millis(50);

impl Relay {
    /// Listen on `listen` (port 0: any) and forward to `upstream`. `name` labels its lines.
    pub(crate) fn start(name: &str, listen: SocketAddr, upstream: SocketAddr, seed: u64) -> Relay {
        let socket =
            UdpSocket::bind(listen).unwrap_or_else(|e| panic!("relay binds {listen}: {e}"));
        socket.set_read_timeout(Some(POLL)).unwrap();
        let address = socket.local_addr().unwrap();
        println!(
            "relay {name}: {address} -> {upstream}, seed {seed} (replay: WEIR_RELAY_SEED={seed})"
        );
        let shared = Arc::new(Shared {
            listen: socket,
            upstream,
            clients: Mutex::new(Vec::new()),
            state: Mutex::new(State {
                up: Shape::clear(),
                down: Shape::clear(),
                per_client: HashMap::new(),
                rng: Rng(seed | 1),
                seq: 0,
                queue: BinaryHeap::new(),
                counters: HashMap::new(),
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            name: name.to_string(),
        });
        let relay = Relay {
            shared: shared.clone(),
            threads: Mutex::new(Vec::new()),
            address,
            seed,
        };
        let listener = {
            let shared = shared.clone();
            std::thread::spawn(move || listen_loop(&shared))
        };
        let sender = {
            let shared = shared.clone();
            std::thread::spawn(move || send_loop(&shared))
        };
        relay.threads.lock().unwrap().extend([listener, sender]);
        relay
    }

    /// Shape one direction from now on (datagrams already waiting keep their deadlines).
    pub(crate) fn set(&self, direction: Direction, shape: Shape) {
        let mut state = self.shared.state.lock().unwrap();
        match direction {
            Direction::Up => state.up = shape,
            Direction::Down => state.down = shape,
        }
        println!("relay {}: {direction:?} now {shape:?}", self.shared.name);
    }

    /// Shape both directions alike.
    pub(crate) fn set_both(&self, shape: Shape) {
        self.set(Direction::Up, shape);
        self.set(Direction::Down, shape);
    }

    /// Shape one client's datagrams in one direction, in place of the direction's shape (None:
    /// the direction's shape again).
    pub(crate) fn set_client(
        &self,
        client: SocketAddr,
        direction: Direction,
        shape: Option<Shape>,
    ) {
        let mut state = self.shared.state.lock().unwrap();
        let entry = state.per_client.entry(client).or_default();
        match direction {
            Direction::Up => entry.0 = shape,
            Direction::Down => entry.1 = shape,
        }
    }

    /// Drop what is waiting for its deadline (a cut that also loses what was in flight).
    pub(crate) fn flush_pending(&self) {
        self.shared.state.lock().unwrap().queue.clear();
    }

    /// The client addresses seen so far, in order.
    pub(crate) fn clients(&self) -> Vec<SocketAddr> {
        let clients = self.shared.clients.lock().unwrap();
        clients.iter().map(|(a, _)| *a).collect()
    }

    /// (passed, dropped, duplicated) per direction so far.
    pub(crate) fn counters(&self) -> String {
        let state = self.shared.state.lock().unwrap();
        let mut out = String::new();
        for direction in [Direction::Up, Direction::Down] {
            if let Some(c) = state.counters.get(&direction) {
                out += &format!(
                    "{direction:?}: {} passed, {} dropped, {} duplicated; ",
                    c.passed, c.dropped, c.duplicated
                );
            }
        }
        out
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap());
        for thread in threads {
            let _ = thread.join();
        }
        println!("relay {}: stopped; {}", self.shared.name, self.counters());
    }
}

/// Read from clients; a new client gets its own upstream socket and a thread reading answers
/// (joined when the relay stops).
fn listen_loop(shared: &Arc<Shared>) {
    let mut readers = Vec::new();
    let mut buf = vec![0u8; 65536];
    while !shared.stop.load(Ordering::SeqCst) {
        let (n, client) = match shared.listen.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => {
                eprintln!("relay {}: recv: {e}", shared.name);
                std::thread::sleep(POLL);
                continue;
            }
        };
        let known = shared
            .clients
            .lock()
            .unwrap()
            .iter()
            .any(|(a, _)| *a == client);
        if !known {
            let bind: SocketAddr = if shared.upstream.is_ipv4() {
                "0.0.0.0:0".parse().unwrap()
            } else {
                "[::]:0".parse().unwrap()
            };
            let socket = UdpSocket::bind(bind).unwrap();
            socket.connect(shared.upstream).unwrap();
            socket.set_read_timeout(Some(POLL)).unwrap();
            let socket = Arc::new(socket);
            shared
                .clients
                .lock()
                .unwrap()
                .push((client, socket.clone()));
            let reader = {
                let shared = shared.clone();
                std::thread::spawn(move || upstream_loop(&shared, client, &socket))
            };
            readers.push(reader);
        }
        enqueue(shared, Direction::Up, client, &buf[..n]);
    }
    for reader in readers {
        let _ = reader.join();
    }
}

/// Read the upstream's answers to one client.
fn upstream_loop(shared: &Shared, client: SocketAddr, socket: &UdpSocket) {
    let mut buf = vec![0u8; 65536];
    while !shared.stop.load(Ordering::SeqCst) {
        match socket.recv(&mut buf) {
            Ok(n) => enqueue(shared, Direction::Down, client, &buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            // ICMP unreachable (the upstream's namespace cut off): nothing to pass on.
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Decide a datagram's fate: dropped, or queued (once or twice) with its deadline.
fn enqueue(shared: &Shared, direction: Direction, client: SocketAddr, bytes: &[u8]) {
    let now = Instant::now();
    let mut state = shared.state.lock().unwrap();
    let own = state.per_client.get(&client).copied().unwrap_or_default();
    let shape = match direction {
        Direction::Up => own.0.unwrap_or(state.up),
        Direction::Down => own.1.unwrap_or(state.down),
    };
    let lost = shape.drop_all || (shape.loss > 0.0 && state.rng.unit() < shape.loss);
    if lost {
        state.counters.entry(direction).or_default().dropped += 1;
        return;
    }
    let copies = if shape.duplicate > 0.0 && state.rng.unit() < shape.duplicate {
        state.counters.entry(direction).or_default().duplicated += 1;
        2
    } else {
        1
    };
    for _ in 0..copies {
        let delay = if shape.jitter.is_zero() {
            shape.delay
        } else {
            let offset = (state.rng.unit() * 2.0 - 1.0) * shape.jitter.as_secs_f64();
            Duration::from_secs_f64((shape.delay.as_secs_f64() + offset).max(0.0))
        };
        state.seq += 1;
        let seq = state.seq;
        state.queue.push(Pending {
            at: now + delay,
            seq,
            direction,
            client,
            bytes: bytes.to_vec(),
        });
    }
    state.counters.entry(direction).or_default().passed += 1;
    drop(state);
    shared.wake.notify_all();
}

/// Send each queued datagram at its deadline, earliest first.
fn send_loop(shared: &Shared) {
    let mut state = shared.state.lock().unwrap();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        match state.queue.peek() {
            Some(first) if first.at <= now => {
                let pending = state.queue.pop().unwrap();
                drop(state);
                match pending.direction {
                    Direction::Up => {
                        let socket = shared
                            .clients
                            .lock()
                            .unwrap()
                            .iter()
                            .find(|(a, _)| *a == pending.client)
                            .map(|(_, s)| s.clone());
                        if let Some(socket) = socket {
                            let _ = socket.send(&pending.bytes);
                        }
                    }
                    Direction::Down => {
                        let _ = shared.listen.send_to(&pending.bytes, pending.client);
                    }
                }
                state = shared.state.lock().unwrap();
            }
            Some(first) => {
                let wait = first.at - now;
                state = shared.wake.wait_timeout(state, wait.min(POLL)).unwrap().0;
            }
            None => {
                state = shared.wake.wait_timeout(state, POLL).unwrap().0;
            }
        }
    }
}
