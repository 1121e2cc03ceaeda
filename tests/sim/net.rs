//! The simulated network under quinn: a `quinn::AsyncUdpSocket` over turmoil's UDP socket, handed
//! to the real shells through weir's `Udp` seam. One datagram per transmit and per receive (no
//! GSO/GRO), no ECN; what turmoil delays, drops or holds (partitions) is what quinn sees.

use std::fmt;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, EndpointConfig, UdpPoller};
use weir::net::udp::Udp;

/// The world's network knobs the simulator turns while it runs (turmoil's own: latency, loss,
/// partitions; these: what turmoil has not), shared by every socket made from it.
#[derive(Clone, Debug)]
pub(crate) struct Net {
    seed: u64,
    /// Percent of datagrams sent twice (the copy arrives on its own, later or earlier: turmoil
    /// draws each one's latency).
    duplicate: Arc<AtomicU64>,
    /// How many times each host started.
    starts: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

impl Net {
    pub(crate) fn new(seed: u64) -> Net {
        Net {
            seed,
            duplicate: Arc::new(AtomicU64::new(0)),
            starts: Arc::default(),
        }
    }

    pub(crate) fn set_duplicate_percent(&self, percent: u64) {
        self.duplicate.store(percent, Ordering::Relaxed);
    }

    /// Host `host` starts (again): how many times it started before (its life). What a real
    /// process draws at random (instance ids, quinn's RNG) differs from one life to the
    /// next: a restarted host must not pass for the one that crashed.
    pub(crate) fn start(&self, host: &str) -> u64 {
        let mut starts = self.starts.lock().unwrap_or_else(|p| p.into_inner());
        let life = starts.entry(host.to_string()).or_default();
        *life += 1;
        *life - 1
    }

    /// A value drawn for process `label` in its host's `life` (the first life's as before
    /// lives were counted, so a seed's trace up to its first restart did not change).
    pub(crate) fn draw(&self, label: &str, life: u64) -> u64 {
        match life {
            0 => mix(&(self.seed, label)),
            _ => mix(&(self.seed, label, life)),
        }
    }

    /// The sockets of host `host`'s one process, in its `life`.
    pub(crate) fn udp(&self, host: &str, life: u64) -> SimUdp {
        self.udp_for(host, host, life)
    }

    /// The sockets of process `label` on host `host` (a manager's workers run on its host).
    pub(crate) fn udp_for(&self, host: &str, label: &str, life: u64) -> SimUdp {
        SimUdp {
            seed: self.draw(label, life),
            host: host.to_string(),
            endpoints: AtomicU64::new(0),
            duplicate: self.duplicate.clone(),
        }
    }
}

/// The sockets of one simulated process. Each endpoint made on them gets its own quinn RNG
/// seed, drawn from the run's seed, the process's name and how many endpoints it made before,
/// so what quinn draws from it replays with the seed (its connection ids and the TLS keys come
/// from the OS: they differ from run to run, the timeline does not).
#[derive(Debug)]
pub(crate) struct SimUdp {
    seed: u64,
    host: String,
    endpoints: AtomicU64,
    duplicate: Arc<AtomicU64>,
}

impl SimUdp {
    /// Bound to `address`'s port on every interface (turmoil binds only wildcards and
    /// loopback), saying the host's own address is its own (what a scheduler publishes).
    fn bind(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        let wildcard = SocketAddr::new(std::net::Ipv4Addr::UNSPECIFIED.into(), address.port());
        // turmoil binds at once (it only looks the host up in the world): one poll finishes it.
        let mut binding = Box::pin(turmoil::net::UdpSocket::bind(wildcard));
        let mut context = Context::from_waker(Waker::noop());
        match binding.as_mut().poll(&mut context) {
            Poll::Ready(socket) => {
                let socket = socket?;
                let local = SocketAddr::new(
                    turmoil::lookup(self.host.as_str()),
                    socket.local_addr()?.port(),
                );
                Ok(Arc::new(SimSocket {
                    socket,
                    local,
                    seed: mix(&(self.seed, local.port())),
                    sent: AtomicU64::new(0),
                    duplicate: self.duplicate.clone(),
                }))
            }
            Poll::Pending => Err(io::Error::other("turmoil's bind did not finish at once")),
        }
    }
}

/// A stable hash (std's `DefaultHasher::new` has fixed keys).
pub(crate) fn mix(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

impl Udp for SimUdp {
    fn listen(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        self.bind(address)
    }

    fn connect_from(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        self.bind(address)
    }

    fn endpoint_config(&self) -> EndpointConfig {
        let n = self.endpoints.fetch_add(1, Ordering::Relaxed);
        let mut seed = [0u8; 32];
        for (i, chunk) in seed.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&mix(&(self.seed, n, i)).to_le_bytes());
        }
        let mut config = EndpointConfig::default();
        config.rng_seed(Some(seed));
        config
    }
}

struct SimSocket {
    socket: turmoil::net::UdpSocket,
    local: SocketAddr,
    /// Whether a datagram is sent twice is drawn from this and how many it sent before.
    seed: u64,
    sent: AtomicU64,
    duplicate: Arc<AtomicU64>,
}

impl fmt::Debug for SimSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimSocket({})", self.local)
    }
}

/// turmoil's UDP has no back-pressure: always writable.
#[derive(Debug)]
struct Writable;

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, _: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for SimSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable)
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.socket
            .try_send_to(transmit.contents, transmit.destination)?;
        let percent = self.duplicate.load(Ordering::Relaxed);
        let n = self.sent.fetch_add(1, Ordering::Relaxed);
        if percent > 0 && mix(&(self.seed, n)) % 100 < percent {
            self.socket
                .try_send_to(transmit.contents, transmit.destination)?;
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let (Some(buf), Some(meta)) = (bufs.first_mut(), meta.first_mut()) else {
            return Poll::Ready(Ok(0));
        };
        loop {
            match self.socket.try_recv_from(buf) {
                Ok((len, addr)) => {
                    meta.addr = addr;
                    meta.len = len;
                    meta.stride = len;
                    meta.ecn = None;
                    meta.dst_ip = None;
                    return Poll::Ready(Ok(1));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Registers the waker on the socket's queue (dropping the future keeps it there:
            // turmoil's readiness is an mpsc receive, which is cancel-safe).
            let mut readable = Box::pin(self.socket.readable());
            match readable.as_mut().poll(cx) {
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        false
    }
}
