//! Connecting to the scheduler: a QUIC endpoint that pins the scheduler's certificate, and the
//! hello exchange on the first stream.

use std::net::SocketAddr;
use std::time::Duration;

use quinn::{Connection, Endpoint, RecvStream, SendStream};
use tokio::task::JoinSet;

use super::udp::{HostUdp, Udp};
use super::{AccessFile, CONNECT_TIMEOUT, NetError, parse_address, tls, transport};
use weir_proto::{FrameError, Hello, HelloReply, PROTOCOL_VERSION, Role};

/// Connect to the scheduler in `access` as `role`, and say hello on the first stream.
pub async fn connect(
    access: &AccessFile,
    role: Role,
    idle_timeout: Duration,
) -> Result<(Endpoint, Connection, SendStream, RecvStream), NetError> {
    connect_with(&HostUdp, access, role, idle_timeout).await
}

/// [`connect`] from a socket of `udp`.
pub async fn connect_with(
    udp: &dyn Udp,
    access: &AccessFile,
    role: Role,
    idle_timeout: Duration,
) -> Result<(Endpoint, Connection, SendStream, RecvStream), NetError> {
    let endpoint = client_endpoint_with(udp, access, idle_timeout)?;
    let (connection, send, recv) = connect_on(&endpoint, access, role).await?;
    Ok((endpoint, connection, send, recv))
}

/// A client endpoint for the scheduler in `access`: it pins its certificate. One endpoint
/// (one UDP socket) may carry many connections ([`connect_on`]).
pub fn client_endpoint(access: &AccessFile, idle_timeout: Duration) -> Result<Endpoint, NetError> {
    client_endpoint_with(&HostUdp, access, idle_timeout)
}

/// [`client_endpoint`] on a socket of `udp`.
pub fn client_endpoint_with(
    udp: &dyn Udp,
    access: &AccessFile,
    idle_timeout: Duration,
) -> Result<Endpoint, NetError> {
    let address = parse_address(&access.address)?;
    let bind: SocketAddr = if address.is_ipv6() {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    }
    .parse()
    .map_err(|_| NetError::Address(access.address.clone()))?;
    let mut endpoint = super::udp::endpoint(udp, udp.connect_from(bind)?, None)?;
    let mut config = tls::client_config(&access.certificate_der()?)?;
    config.transport_config(transport(idle_timeout));
    endpoint.set_default_client_config(config);
    Ok(endpoint)
}

/// Connect on `endpoint` (from [`client_endpoint`]) as `role`, and say hello on the first
/// stream. With scheduler replicas, to the one that leads: every replica the access file names
/// is tried at once (one that is down costs no wait before the others), a follower's answer
/// names the leader (tried too), and the first to welcome the peer is kept.
pub async fn connect_on(
    endpoint: &Endpoint,
    access: &AccessFile,
    role: Role,
) -> Result<(Connection, SendStream, RecvStream), NetError> {
    if access.replicas.is_empty() {
        return match hello_at(endpoint, access, &access.address, role).await? {
            Answer::Welcome(connected) => Ok(connected),
            Answer::NotLeader(_) => Err(NetError::Connect {
                address: access.address.clone(),
                error: "it does not lead (a scheduler replica)".into(),
            }),
        };
    }
    // Every replica at once; a follower that knows no leader yet (an election under way) is
    // asked again every 200 ms, so the new leader is found as soon as it is elected rather
    // than after a replica that is down has timed out; all within CONNECT_TIMEOUT.
    let started = tokio::time::Instant::now();
    let mut asked: Vec<String> = Vec::new();
    let mut attempts = JoinSet::new();
    let ask = |address: String, after: Duration, attempts: &mut JoinSet<_>| {
        let (endpoint, access) = (endpoint.clone(), access.clone());
        attempts.spawn(async move {
            tokio::time::sleep(after).await;
            let result = hello_at(&endpoint, &access, &address, role).await;
            (address, result)
        });
    };
    for address in access.candidates() {
        asked.push(address.clone());
        ask(address, Duration::ZERO, &mut attempts);
    }
    let mut why = Vec::new();
    let mut refused = None;
    while let Some(done) = attempts.join_next().await {
        let Ok((address, result)) = done else {
            continue;
        };
        match result {
            Ok(Answer::Welcome(connected)) => return Ok(connected),
            Ok(Answer::NotLeader(Some(leader))) if !asked.contains(&leader) => {
                why.push(format!("{address} does not lead"));
                asked.push(leader.clone());
                ask(leader, Duration::ZERO, &mut attempts);
            }
            Ok(Answer::NotLeader(_)) if started.elapsed() < CONNECT_TIMEOUT => {
                ask(address, Duration::from_millis(200), &mut attempts);
            }
            Ok(Answer::NotLeader(_)) => why.push(format!("{address} does not lead")),
            // A wrong token or version (every replica would say so), or a replica at its
            // connection limit: said if no other welcomes the peer.
            Err(error @ NetError::Refused(_)) => refused = Some(error),
            Err(error) => why.push(error.to_string()),
        }
    }
    if let Some(refused) = refused {
        return Err(refused);
    }
    Err(NetError::Connect {
        address: asked.join(", "),
        error: format!("no scheduler replica leads now ({})", why.join("; ")),
    })
}

/// How a scheduler answered a hello.
enum Answer {
    Welcome((Connection, SendStream, RecvStream)),
    /// A replica that does not lead, and the leader it knows.
    NotLeader(Option<String>),
}

/// Connect to the scheduler at `address` (one of `access`'s) and say hello as `role`.
async fn hello_at(
    endpoint: &Endpoint,
    access: &AccessFile,
    address: &str,
    role: Role,
) -> Result<Answer, NetError> {
    let socket = parse_address(address)?;
    let connecting = endpoint
        .connect(socket, tls::SERVER_NAME)
        .map_err(|e| NetError::Connect {
            address: address.to_string(),
            error: e.to_string(),
        })?;
    // A scheduler that is down answers nothing (QUIC ignores ICMP): give up on the handshake
    // well before the idle timeout, so callers can retry or say so.
    let connection = match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
        Ok(connected) => connected.map_err(|e| NetError::Connect {
            address: address.to_string(),
            error: e.to_string(),
        })?,
        Err(_) => {
            return Err(NetError::Connect {
                address: address.to_string(),
                error: format!("no answer within {CONNECT_TIMEOUT:?}"),
            });
        }
    };
    let (mut send, mut recv) = connection.open_bi().await?;
    let token = match role {
        Role::Client => access.client_token.clone(),
        Role::Worker | Role::Manager | Role::Replica => access.worker_token.clone(),
    };
    weir_proto::frame::write(
        &mut send,
        &Hello {
            version: PROTOCOL_VERSION,
            role,
            token,
        },
    )
    .await?;
    match weir_proto::frame::read::<_, HelloReply>(&mut recv).await {
        Ok(HelloReply::Welcome) => Ok(Answer::Welcome((connection, send, recv))),
        Ok(HelloReply::NotLeader { leader }) => {
            connection.close(0u32.into(), b"not the leader");
            Ok(Answer::NotLeader(leader))
        }
        Ok(HelloReply::Refused { reason }) => Err(NetError::Refused(reason)),
        Err(FrameError::Closed) => Err(NetError::Refused("connection closed during hello".into())),
        Err(e) => Err(e.into()),
    }
}
