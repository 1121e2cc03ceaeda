//! The UDP sockets under the QUIC endpoints: one seam ([`Udp`]), so a simulated network can hand
//! quinn a socket of its own (a `quinn::AsyncUdpSocket`); [`HostUdp`] binds the host's, as
//! quinn's `Endpoint::server` and `Endpoint::client` do.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use quinn::{AsyncUdpSocket, Endpoint, EndpointConfig, Runtime, ServerConfig};

/// Seam: the UDP socket a QUIC endpoint sends and receives on.
pub trait Udp: Send + Sync + fmt::Debug {
    /// The scheduler's socket, bound to `address` (port 0: any free one).
    fn listen(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>>;
    /// A socket to connect from, bound to `address` (a wildcard, port 0; dual-stack for IPv6).
    fn connect_from(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>>;
    /// The configuration of the next endpoint made on one of these sockets: quinn's default
    /// (a simulated network seeds its `rng_seed`, so connection ids replay).
    fn endpoint_config(&self) -> EndpointConfig {
        EndpointConfig::default()
    }
}

/// The socket buffers the scheduler asks for (8 MiB each way; Linux caps them at
/// `net.core.rmem_max` and `wmem_max`, 4 MiB on this project's machine, and counts the
/// kernel's overhead in them).
const SERVER_SOCKET_BUFFER: usize = 8 << 20;

/// The host's sockets, driven by the async runtime that runs the caller (tokio's).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostUdp;

impl Udp for HostUdp {
    fn listen(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(
            Domain::for_address(address),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        // Thousands of peers' datagrams arrive while the one runtime thread is busy (a burst of
        // handshakes, a long round): the kernel's default queue (~200 KiB, about 150 full
        // datagrams) overflows and drops them, and QUIC then waits out its loss timers. Ask
        // for more; the kernel caps it at net.core.rmem_max / wmem_max.
        for (what, result) in [
            ("receive", socket.set_recv_buffer_size(SERVER_SOCKET_BUFFER)),
            ("send", socket.set_send_buffer_size(SERVER_SOCKET_BUFFER)),
        ] {
            if let Err(error) = result {
                tracing::debug!(%error, "unable to enlarge the socket's {what} buffer");
            }
        }
        tracing::debug!(
            receive = ?socket.recv_buffer_size(),
            send = ?socket.send_buffer_size(),
            "the scheduler's socket buffers"
        );
        socket.bind(&address.into())?;
        runtime()?.wrap_udp_socket(socket.into())
    }

    fn connect_from(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(
            Domain::for_address(address),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        if address.is_ipv6()
            && let Err(error) = socket.set_only_v6(false)
        {
            tracing::debug!(%error, "unable to make socket dual-stack");
        }
        socket.bind(&address.into())?;
        runtime()?.wrap_udp_socket(socket.into())
    }
}

/// A QUIC endpoint on `socket` (from `udp`; a server with `server`), configured by
/// [`Udp::endpoint_config`].
pub fn endpoint(
    udp: &dyn Udp,
    socket: Arc<dyn AsyncUdpSocket>,
    server: Option<ServerConfig>,
) -> io::Result<Endpoint> {
    Endpoint::new_with_abstract_socket(udp.endpoint_config(), server, socket, runtime()?)
}

fn runtime() -> io::Result<Arc<dyn Runtime>> {
    quinn::default_runtime().ok_or_else(|| io::Error::other("no async runtime found"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::{AccessFile, client_endpoint_with, tls};

    /// The host's sockets, counted: what a simulated network would hand out instead.
    #[derive(Debug, Default)]
    struct Counted(AtomicUsize);

    impl Udp for Counted {
        fn listen(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            HostUdp.listen(address)
        }

        fn connect_from(&self, address: SocketAddr) -> io::Result<Arc<dyn AsyncUdpSocket>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            HostUdp.connect_from(address)
        }
    }

    #[test]
    fn a_quic_connection_runs_on_sockets_from_the_seam() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let udp = Counted::default();
            let (cert, key) = tls::generate().expect("a certificate");
            let server_config = tls::server_config(&cert, &key).expect("a server config");
            let listening = udp.listen("127.0.0.1:0".parse().expect("an address"));
            let server =
                endpoint(&udp, listening.expect("bound"), Some(server_config)).expect("served");
            let address = server.local_addr().expect("its address");
            let access = AccessFile {
                address: format!("quic://{address}"),
                certificate: cert,
                worker_token: String::new(),
                client_token: String::new(),
                replicas: Vec::new(),
                ..Default::default()
            };
            let client = client_endpoint_with(&udp, &access, Duration::from_secs(30))
                .expect("a client endpoint");
            let connecting = client
                .connect(address, tls::SERVER_NAME)
                .expect("connecting");
            let accepted = async {
                let incoming = server.accept().await.expect("an incoming connection");
                incoming.await
            };
            let deadline = Duration::from_secs(30);
            let (connected, accepted) =
                tokio::time::timeout(deadline, async { tokio::join!(connecting, accepted) })
                    .await
                    .expect("the handshake ends in time");
            assert!(
                connected.is_ok() && accepted.is_ok(),
                "{connected:?} {accepted:?}"
            );
            assert_eq!(
                udp.0.load(Ordering::SeqCst),
                2,
                "both sockets came from the seam"
            );
        });
    }
}
