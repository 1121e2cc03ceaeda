//! The scheduler's HTTP servers (`--metrics`, `--dashboard`): hyper's http1 connections under an
//! axum router, within budgets one client cannot hog. Each server keeps at most
//! [`MAX_HTTP_CONNECTIONS`] connections, [`MAX_HTTP_CONNECTIONS_PER_ADDRESS`] from one address,
//! and closes the idlest connection (not the newcomer) when a budget is full; event streams have
//! a smaller budget of their own ([`MAX_STREAMS`]); a connection that sends no request for
//! [`HEADER_TIMEOUT`] is closed.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// The HTTP budgets (metrics and dashboard, each server its own): at most this many
/// connections at once...
pub(super) const MAX_HTTP_CONNECTIONS: usize = 256;

/// ...at most this many from one address (an IPv4 address, an IPv6 /64, all of loopback as one:
/// what one machine usually has). A browser opens at most 6 to a host; a scraper, one.
pub(super) const MAX_HTTP_CONNECTIONS_PER_ADDRESS: usize = 32;

/// Event streams (the dashboard's `/api/events`, open as long as a page is) in all and per
/// address: fewer than the connections, so that streams never hold what page loads need.
pub(super) const MAX_STREAMS: usize = 64;
pub(super) const MAX_STREAMS_PER_ADDRESS: usize = 8;

/// A client must send a request head within this time of opening its connection or of the end
/// of its last response (hyper's header-read timeout runs while a kept-alive connection waits),
/// or its connection is closed: connections idle this long are closed.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Serve `app` until the process ends: HTTP/1.1, within the budgets above.
///
/// A connection over a budget does not simply lose: when its address holds its 32, or all 256
/// are taken, the connection with no request in flight (and no stream) that has waited longest
/// is closed for it — its address's own, or one of the address holding the most. So someone
/// who holds connections open, even from the newcomer's own address (loopback: the browser and
/// the attacker are one), cannot keep a newcomer out: a newcomer is refused only when every
/// connection is busy answering, and at most 64 of them (8 per address) can stay busy (streams).
/// Connections that have been answered go before ones that have not sent a request yet.
pub(super) async fn serve_http(listener: TcpListener, app: Router, what: &'static str) {
    let budget = Budget::new(Limits {
        connections: MAX_HTTP_CONNECTIONS,
        per_address: MAX_HTTP_CONNECTIONS_PER_ADDRESS,
        streams: MAX_STREAMS,
        streams_per_address: MAX_STREAMS_PER_ADDRESS,
    });
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, server = what, "cannot accept an HTTP connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (connection, evicted) = match budget.admit(peer.ip()) {
            Ok(admitted) => admitted,
            Err(full) => {
                tracing::warn!(server = what, %peer, "HTTP connection closed: {full}");
                continue;
            }
        };
        let app = app.clone();
        tokio::spawn(async move {
            // Handlers find their connection (for `Connection::stream`) among the request's
            // extensions. A request is in flight until its response's head is ready: a body
            // still being written (to a client that does not read it, say) holds nothing.
            let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
                let in_flight = connection.request();
                request.extensions_mut().insert(connection.clone());
                let response = tower::ServiceExt::oneshot(app.clone(), request);
                async move {
                    let response = response.await;
                    drop(in_flight);
                    response
                }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let serving = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            tokio::select! {
                ended = serving => if let Err(error) = ended {
                    tracing::debug!(%error, server = what, "HTTP connection ended");
                },
                _ = evicted => {
                    tracing::debug!(server = what, %peer, "idle HTTP connection closed for a newcomer");
                }
            }
        });
        // Let it read its request (a client sends it with its connection) before the next
        // connection is taken: in a burst of them (on the one runtime thread) it would
        // otherwise be the oldest that has not asked yet, the first closed for the next.
        tokio::task::yield_now().await;
    }
}

/// The budgets of one server.
#[derive(Clone, Copy, Debug)]
struct Limits {
    connections: usize,
    per_address: usize,
    streams: usize,
    streams_per_address: usize,
}

/// Who the budgets count for: one IPv4 address, one IPv6 /64, all of loopback as one.
fn holder(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => holder(IpAddr::V4(v4)),
            None if v6.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            None => {
                let [a, b, c, d, ..] = v6.segments();
                IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
            }
        },
    }
}

/// The open connections of one server, by address.
struct Budget {
    limits: Limits,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Open>,
    holders: HashMap<IpAddr, Held>,
    streams: usize,
}

struct Open {
    holder: IpAddr,
    /// Requests whose response head is not ready yet.
    in_flight: u32,
    /// Open event streams.
    streams: u32,
    /// Whether a request of it was answered.
    answered: bool,
    /// When it opened, or its last request was answered.
    since: Instant,
    /// Closes it (to make room for a newcomer).
    close: oneshot::Sender<()>,
}

#[derive(Default)]
struct Held {
    connections: usize,
    streams: usize,
}

/// Why a connection was not admitted.
#[derive(Debug, thiserror::Error)]
enum Full {
    #[error("its address holds {0} connections, all busy")]
    Address(usize),
    #[error("{0} connections open, all busy")]
    Server(usize),
}

impl Table {
    fn held(&mut self, holder: IpAddr) -> &mut Held {
        self.holders.entry(holder).or_default()
    }

    fn release(&mut self, holder: IpAddr, connections: usize, streams: usize) {
        if let Some(held) = self.holders.get_mut(&holder) {
            held.connections -= connections;
            held.streams -= streams;
            if held.connections == 0 && held.streams == 0 {
                self.holders.remove(&holder);
            }
        }
    }

    /// The connection to close for a newcomer: one with nothing in flight and no stream, of
    /// `holder` if given, else of the address holding the most; answered ones first, then the
    /// one waiting longest.
    fn idlest(&self, holder: Option<IpAddr>) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, o)| o.in_flight == 0 && o.streams == 0)
            .filter(|(_, o)| holder.is_none_or(|h| o.holder == h))
            .min_by_key(|(id, o)| {
                let held = self.holders.get(&o.holder).map_or(0, |h| h.connections);
                (std::cmp::Reverse(held), !o.answered, o.since, **id)
            })
            .map(|(id, _)| *id)
    }
}

impl Budget {
    fn new(limits: Limits) -> Arc<Budget> {
        Arc::new(Budget {
            limits,
            table: Mutex::default(),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // Nothing panics while holding it; a poisoned table is still consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection from `ip`, within the budgets (an idle one closed for it if need be), and
    /// what tells it to close in its turn.
    fn admit(self: &Arc<Budget>, ip: IpAddr) -> Result<(Connection, oneshot::Receiver<()>), Full> {
        let holder = holder(ip);
        let mut table = self.table();
        let held = table.holders.get(&holder).map_or(0, |h| h.connections);
        let victim = if held >= self.limits.per_address {
            Some(table.idlest(Some(holder)).ok_or(Full::Address(held))?)
        } else if table.open.len() >= self.limits.connections {
            Some(table.idlest(None).ok_or(Full::Server(table.open.len()))?)
        } else {
            None
        };
        if let Some(id) = victim
            && let Some(open) = table.open.remove(&id)
        {
            table.release(open.holder, 1, 0);
            let _ = open.close.send(());
        }
        let (close, closed) = oneshot::channel();
        let id = table.next;
        table.next += 1;
        table.open.insert(
            id,
            Open {
                holder,
                in_flight: 0,
                streams: 0,
                answered: false,
                since: Instant::now(),
                close,
            },
        );
        table.held(holder).connections += 1;
        let connection = Connection(Arc::new(Slot {
            budget: self.clone(),
            id,
            holder,
        }));
        Ok((connection, closed))
    }
}

/// One admitted connection; its slot is given back when the last clone is dropped.
#[derive(Clone)]
pub(super) struct Connection(Arc<Slot>);

struct Slot {
    budget: Arc<Budget>,
    id: u64,
    holder: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.budget.table();
        // Gone already if it was closed for a newcomer.
        if table.open.remove(&self.id).is_some() {
            table.release(self.holder, 1, 0);
        }
    }
}

/// A request in flight on a connection.
struct InFlight(Connection);

impl Drop for InFlight {
    fn drop(&mut self) {
        let slot = &self.0.0;
        if let Some(open) = slot.budget.table().open.get_mut(&slot.id) {
            open.in_flight -= 1;
            open.answered = true;
            open.since = Instant::now();
        }
    }
}

/// An open event stream; it gives back its place in the stream budget when dropped.
pub(super) struct Stream(Connection);

impl Drop for Stream {
    fn drop(&mut self) {
        let slot = &self.0.0;
        let mut table = slot.budget.table();
        table.streams -= 1;
        table.release(slot.holder, 0, 1);
        if let Some(open) = table.open.get_mut(&slot.id) {
            open.streams -= 1;
            open.since = Instant::now();
        }
    }
}

impl Connection {
    fn request(&self) -> InFlight {
        let slot = &self.0;
        if let Some(open) = slot.budget.table().open.get_mut(&slot.id) {
            open.in_flight += 1;
        }
        InFlight(self.clone())
    }

    /// A place for an event stream on this connection, kept while the `Stream` lives; `None`
    /// when the server or this address has all it may have.
    pub(super) fn stream(&self) -> Option<Stream> {
        let slot = &self.0;
        let limits = slot.budget.limits;
        let mut table = slot.budget.table();
        let held = table.holders.get(&slot.holder).map_or(0, |h| h.streams);
        if table.streams >= limits.streams || held >= limits.streams_per_address {
            return None;
        }
        table.streams += 1;
        table.held(slot.holder).streams += 1;
        if let Some(open) = table.open.get_mut(&slot.id) {
            open.streams += 1;
        }
        Some(Stream(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn budget() -> Arc<Budget> {
        Budget::new(Limits {
            connections: 4,
            per_address: 2,
            streams: 2,
            streams_per_address: 1,
        })
    }

    #[test]
    fn addresses_count_as_one_machine_has_them() {
        assert_eq!(holder(ip("127.0.0.7")), holder(ip("::1")));
        assert_eq!(holder(ip("::ffff:10.0.0.1")), ip("10.0.0.1"));
        assert_eq!(
            holder(ip("2001:db8:1:2:a::1")),
            holder(ip("2001:db8:1:2:b::2"))
        );
        assert_ne!(holder(ip("2001:db8:1:2::1")), holder(ip("2001:db8:1:3::1")));
        assert_ne!(holder(ip("10.0.0.1")), holder(ip("10.0.0.2")));
    }

    #[test]
    fn a_newcomer_over_its_addresss_budget_closes_its_idlest_connection() {
        let budget = budget();
        let (first, mut first_closed) = budget.admit(ip("127.0.0.1")).unwrap();
        let (second, mut second_closed) = budget.admit(ip("127.0.0.2")).unwrap();
        // Answered (the second) goes before never asked (the first), though younger.
        drop(second.request());
        let (third, mut third_closed) = budget.admit(ip("::1")).unwrap();
        assert!(second_closed.try_recv().is_ok());
        assert!(first_closed.try_recv().is_err());
        // A connection with a request in flight is never closed for a newcomer: the one that
        // waits longest without is (the first, then the third).
        let _busy = third.request();
        let (_fourth, _) = budget.admit(ip("127.0.0.1")).unwrap();
        assert!(first_closed.try_recv().is_ok());
        assert!(third_closed.try_recv().is_err());
        drop((first, second));
        // Another address is not touched by this one's budget.
        let (_other, mut other_closed) = budget.admit(ip("10.0.0.1")).unwrap();
        let (_, _) = budget.admit(ip("127.0.0.1")).unwrap();
        assert!(other_closed.try_recv().is_err());
    }

    #[test]
    fn a_full_server_closes_an_idle_connection_of_the_biggest_holder() {
        let budget = budget();
        let (_a1, mut a1_closed) = budget.admit(ip("10.0.0.1")).unwrap();
        let (_a2, mut a2_closed) = budget.admit(ip("10.0.0.1")).unwrap();
        let (_b, mut b_closed) = budget.admit(ip("10.0.0.2")).unwrap();
        let (_c, mut c_closed) = budget.admit(ip("10.0.0.3")).unwrap();
        let (_d, _) = budget.admit(ip("10.0.0.4")).unwrap();
        assert!(a1_closed.try_recv().is_ok());
        assert!(a2_closed.try_recv().is_err());
        assert!(b_closed.try_recv().is_err() && c_closed.try_recv().is_err());
    }

    #[test]
    fn busy_connections_and_streams_are_kept_and_streams_have_their_own_budget() {
        let budget = budget();
        let (a, _) = budget.admit(ip("10.0.0.1")).unwrap();
        let (b, _) = budget.admit(ip("10.0.0.1")).unwrap();
        let stream = a.stream().expect("a first stream");
        assert!(b.stream().is_none(), "one stream per address");
        let busy = b.request();
        assert!(matches!(
            budget.admit(ip("10.0.0.1")),
            Err(Full::Address(2))
        ));
        let (c, _) = budget.admit(ip("10.0.0.2")).unwrap();
        let _second = c.stream().expect("a stream of another address");
        let (d, _) = budget.admit(ip("10.0.0.3")).unwrap();
        assert!(d.stream().is_none(), "two streams in all");
        drop(stream);
        let _third = d.stream().expect("the place given back");
        // All four busy or streaming: a fifth is refused, not let in over the budget.
        let busy_too = a.request();
        assert!(matches!(budget.admit(ip("10.0.0.4")), Err(Full::Server(4))));
        // Closed connections give their places back.
        drop((a, b, busy, busy_too));
        assert!(budget.admit(ip("10.0.0.1")).is_ok());
        assert!(budget.admit(ip("10.0.0.1")).is_ok());
    }
}
