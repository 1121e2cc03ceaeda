//! A link: one stream pair carrying typed frames both ways, with the task that writes it.
//!
//! [`Link::open`] hands back the link, for typed reads ([`Link::next`]), and an [`Outbox`], for
//! typed sends that never block. A writer task of the link's own writes what the outboxes queue,
//! the frames queued at once in one write; once every outbox is dropped and all is written it
//! ends the stream. Reading needs no task: [`FrameReader`] keeps a frame read in part, so `next`
//! is cancel-safe and may sit in a `select!` beside timers and signals. Dropping the link stops
//! the writer.
//!
//! What an idle link costs counts: the scheduler holds one per worker and manager. The outbox
//! is a `futures-channel` unbounded queue, which allocates per message queued (a node), where
//! tokio's allocates its first block of 32 slots at creation (1–2 KiB for these messages, per
//! connection, used or not).
//!
//! [`Link::request`] is the client's case: one message written at once, then answers read.

use futures_channel::mpsc;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::{JoinError, JoinHandle};

use weir_proto::{FrameError, FrameReader};

/// The most bytes one write gathers from the frames queued at once.
const MAX_WRITE: usize = 1 << 20;

/// The sending half of a [`Link`]: queues messages for its writer. Cheap to clone; the link's
/// stream ends once every clone is dropped and what they queued is written.
#[derive(Debug)]
pub struct Outbox<T>(mpsc::UnboundedSender<T>);

impl<T> Clone for Outbox<T> {
    fn clone(&self) -> Self {
        Outbox(self.0.clone())
    }
}

/// A message queued after the writer ended, given back.
#[derive(Debug, thiserror::Error)]
#[error("the link's writer has ended")]
pub struct Closed<T>(pub T);

impl<T> Outbox<T> {
    /// Queue `message`; it comes back in the error once the writer has ended.
    pub fn send(&self, message: T) -> Result<(), Closed<T>> {
        self.0
            .unbounded_send(message)
            .map_err(|error| Closed(error.into_inner()))
    }

    /// Whether the writer has ended (a send would fail).
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

/// Why a link ended. [`LinkEnd::Read`] with [`FrameError::Closed`] is the peer ending its stream
/// between frames.
#[derive(Debug, thiserror::Error)]
pub enum LinkEnd {
    /// Reading ended: the peer finished its stream, the connection was lost, or a frame did not
    /// decode.
    #[error(transparent)]
    Read(FrameError),
    /// Writing failed: the connection was lost, or a message could not be encoded.
    #[error(transparent)]
    Write(FrameError),
    /// Every outbox was dropped and all they queued is written: this side ended the link.
    #[error("connection writer ended")]
    Finished,
    /// The writer task panicked or was cancelled.
    #[error("connection writer failed: {0}")]
    Writer(JoinError),
}

impl LinkEnd {
    /// The peer ended its stream cleanly, between frames.
    pub fn is_closed(&self) -> bool {
        matches!(self, LinkEnd::Read(FrameError::Closed))
    }
}

/// The receiving side of a link, typed `In`, reading `R`, over the sending stream `W`.
pub struct Link<In, W = quinn::SendStream, R = quinn::RecvStream> {
    reader: FrameReader<R>,
    /// Running until every outbox is gone (or a write fails); `None` once it ended.
    writer: Option<JoinHandle<Result<W, FrameError>>>,
    /// The stream, ended, once the writer has finished with it.
    ended: Option<W>,
    /// The type of the frames read.
    reads: std::marker::PhantomData<fn() -> In>,
}

impl<In, W, R> Link<In, W, R>
where
    In: DeserializeOwned,
    W: AsyncWrite + Unpin + Send + 'static,
    R: AsyncRead + Unpin,
{
    /// Start the writer task of a stream pair.
    pub fn open<Out>(send: W, recv: R) -> (Link<In, W, R>, Outbox<Out>)
    where
        Out: Serialize + Send + 'static,
    {
        let (outgoing, queued) = mpsc::unbounded();
        let link = Link {
            reader: FrameReader::new(recv),
            writer: Some(tokio::spawn(write_queued(send, queued))),
            ended: None,
            reads: std::marker::PhantomData,
        };
        (link, Outbox(outgoing))
    }

    /// Write `message`, end the stream, and read what answers it (a link without an outbox).
    pub async fn request<Out>(
        mut send: W,
        recv: R,
        message: &Out,
    ) -> Result<Link<In, W, R>, FrameError>
    where
        Out: Serialize,
    {
        weir_proto::frame::write(&mut send, message).await?;
        let _ = send.shutdown().await;
        Ok(Link {
            reader: FrameReader::new(recv),
            writer: None,
            ended: Some(send),
            reads: std::marker::PhantomData,
        })
    }

    /// The peer's next message, or why the link ended. Cancel-safe. [`LinkEnd::Finished`] comes
    /// once, when this side has ended the stream; reading goes on after it.
    pub async fn next(&mut self) -> Result<In, LinkEnd> {
        let Link {
            reader,
            writer,
            ended,
            ..
        } = self;
        let writer_ends = async {
            match writer {
                Some(handle) => handle.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            frame = reader.next() => frame.map_err(LinkEnd::Read),
            outcome = writer_ends => {
                *writer = None;
                match outcome {
                    Ok(Ok(stream)) => {
                        *ended = Some(stream);
                        Err(LinkEnd::Finished)
                    }
                    Ok(Err(error)) => Err(LinkEnd::Write(error)),
                    Err(error) => Err(LinkEnd::Writer(error)),
                }
            }
        }
    }

    /// Wait until the writer has written everything and ended the stream (every outbox must be
    /// dropped first, or this waits for ever), and take the stream: a QUIC sender may then wait
    /// until the peer has it all (`stopped`). Cancel-safe. [`LinkEnd::Finished`] when the stream
    /// was taken already.
    pub async fn finished(&mut self) -> Result<W, LinkEnd> {
        if let Some(handle) = &mut self.writer {
            let outcome = handle.await;
            self.writer = None;
            match outcome {
                Ok(Ok(stream)) => self.ended = Some(stream),
                Ok(Err(error)) => return Err(LinkEnd::Write(error)),
                Err(error) => return Err(LinkEnd::Writer(error)),
            }
        }
        self.ended.take().ok_or(LinkEnd::Finished)
    }
}

impl<In, W, R> Drop for Link<In, W, R> {
    fn drop(&mut self) {
        if let Some(writer) = &self.writer {
            writer.abort();
        }
    }
}

/// The writer task: whatever is queued goes out in one write (up to [`MAX_WRITE`] bytes); when
/// every outbox is gone the stream is ended and handed back.
async fn write_queued<Out, W>(
    mut send: W,
    mut queued: mpsc::UnboundedReceiver<Out>,
) -> Result<W, FrameError>
where
    Out: Serialize,
    W: AsyncWrite + Unpin,
{
    let mut buffer = Vec::new();
    while let Ok(message) = queued.recv().await {
        buffer.clear();
        buffer.extend_from_slice(&weir_proto::encode(&message)?);
        while buffer.len() < MAX_WRITE {
            match queued.try_recv() {
                Ok(message) => buffer.extend_from_slice(&weir_proto::encode(&message)?),
                Err(_) => break,
            }
        }
        send.write_all(&buffer).await?;
        // An idle link keeps no buffer the size of its largest burst.
        if buffer.capacity() > 4 << 10 {
            buffer = Vec::new();
        }
    }
    let _ = send.shutdown().await;
    Ok(send)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{DuplexStream, duplex};
    use weir_proto::{FromManager, ToManager};

    /// One end of an in-memory link: what it reads, and its outbox.
    type End<In, Out> = (Link<In, DuplexStream, DuplexStream>, Outbox<Out>);

    /// The two ends of an in-memory link: a manager's and the scheduler's.
    fn pair() -> (End<ToManager, FromManager>, End<FromManager, ToManager>) {
        let (a_send, b_recv) = duplex(1 << 16);
        let (b_send, a_recv) = duplex(1 << 16);
        (Link::open(a_send, a_recv), Link::open(b_send, b_recv))
    }

    fn desired(n: u32) -> ToManager {
        ToManager::Desired {
            desired: n,
            stop: Vec::new(),
            registered: Vec::new(),
            reason: String::new(),
            instances: Vec::new(),
        }
    }

    #[tokio::test]
    async fn typed_frames_both_ways_then_the_end_of_each_side() {
        let ((mut a, a_out), (mut b, b_out)) = pair();
        for n in 0..100 {
            b_out.send(desired(n)).unwrap();
        }
        for n in 0..100 {
            assert_eq!(a.next().await.unwrap(), desired(n));
        }
        a_out.send(FromManager::Goodbye).unwrap();
        assert_eq!(b.next().await.unwrap(), FromManager::Goodbye);
        // a drops its last outbox: its writer ends the stream, a learns it once...
        drop(a_out);
        assert!(matches!(a.next().await, Err(LinkEnd::Finished)));
        // ...and b reads the end of the stream.
        assert!(b.next().await.unwrap_err().is_closed());
        assert!(a.finished().await.is_ok());
        assert!(matches!(a.finished().await, Err(LinkEnd::Finished)));
        // b's side still works.
        b_out.send(desired(7)).unwrap();
        assert_eq!(a.next().await.unwrap(), desired(7));
    }

    #[tokio::test]
    async fn next_is_cancel_safe() {
        let ((mut a, _a_out), (_b, b_out)) = pair();
        let sent: Vec<ToManager> = (0..500).map(desired).collect();
        let feeding = {
            let sent = sent.clone();
            tokio::spawn(async move {
                for message in sent {
                    b_out.send(message).unwrap();
                    tokio::task::yield_now().await;
                }
            })
        };
        let mut got = Vec::new();
        let mut ticks = tokio::time::interval(std::time::Duration::from_micros(50));
        while got.len() < sent.len() {
            tokio::select! {
                message = a.next() => got.push(message.unwrap()),
                _ = ticks.tick() => {}
            }
        }
        feeding.await.unwrap();
        assert_eq!(got, sent);
    }

    #[tokio::test]
    async fn a_message_too_large_ends_the_writer_with_its_error() {
        let (a_send, _b_recv) = duplex(1 << 10);
        let (_b_send, a_recv) = duplex(1 << 10);
        let (mut a, outbox) = Link::<ToManager, DuplexStream, DuplexStream>::open(a_send, a_recv);
        let huge = ToManager::Desired {
            desired: 1,
            stop: vec!["x".repeat(weir_proto::MAX_FRAME)],
            registered: Vec::new(),
            reason: String::new(),
            instances: Vec::new(),
        };
        outbox.send(huge).unwrap();
        assert!(matches!(
            a.next().await,
            Err(LinkEnd::Write(FrameError::TooLarge { .. }))
        ));
    }

    #[tokio::test]
    async fn a_request_link_writes_once_and_reads_the_answers() {
        let (client_send, server_recv) = duplex(1 << 16);
        let (server_send, client_recv) = duplex(1 << 16);
        let (mut server, answers) =
            Link::<FromManager, DuplexStream, DuplexStream>::open(server_send, server_recv);
        let mut client = Link::<ToManager, DuplexStream, DuplexStream>::request(
            client_send,
            client_recv,
            &FromManager::Goodbye,
        )
        .await
        .unwrap();
        assert_eq!(server.next().await.unwrap(), FromManager::Goodbye);
        assert!(server.next().await.unwrap_err().is_closed());
        answers.send(desired(1)).unwrap();
        answers.send(desired(2)).unwrap();
        drop(answers);
        assert!(server.finished().await.is_ok());
        assert_eq!(client.next().await.unwrap(), desired(1));
        assert_eq!(client.next().await.unwrap(), desired(2));
        assert!(client.next().await.unwrap_err().is_closed());
    }
}
