//! Frames: a big-endian u32 length, then that many bytes of postcard. Frames larger than
//! [`MAX_FRAME`] are refused before any allocation, so a peer cannot make us buffer gigabytes.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame either side accepts: 48 MiB (room for a large component, e.g. an 18 MB
/// Python condition, plus its message).
pub const MAX_FRAME: usize = 48 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes exceeds the {limit}-byte limit")]
    TooLarge { size: usize, limit: usize },
    #[error("undecodable frame: {0}")]
    Decode(postcard::Error),
    #[error("cannot encode a message: {0}")]
    Encode(postcard::Error),
    #[error("connection closed")]
    Closed,
    /// Built by `From`, not `#[from]`: that would also make the error its source, and `{:#}`
    /// would print it twice.
    #[error("i/o: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for FrameError {
    fn from(error: std::io::Error) -> FrameError {
        FrameError::Io(error)
    }
}

/// The frame bytes (length prefix included) of `message`.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    encode_limited(message, MAX_FRAME)
}

/// [`encode`] with a limit of its own (scheduler replicas' Raft messages carry more).
pub fn encode_limited<T: Serialize>(message: &T, limit: usize) -> Result<Vec<u8>, FrameError> {
    let mut bytes = postcard::to_extend(message, vec![0u8; 4]).map_err(FrameError::Encode)?;
    let size = bytes.len() - 4;
    if size > limit || u32::try_from(size).is_err() {
        return Err(FrameError::TooLarge { size, limit });
    }
    bytes[..4].copy_from_slice(&(size as u32).to_be_bytes());
    Ok(bytes)
}

/// Decode one frame's payload (without its length prefix).
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    postcard::from_bytes(payload).map_err(FrameError::Decode)
}

pub async fn write<W: AsyncWrite + Unpin, T: Serialize>(
    writer: &mut W,
    message: &T,
) -> Result<(), FrameError> {
    writer.write_all(&encode(message)?).await?;
    Ok(())
}

/// Most bytes of the frames a peer sends before it is authenticated (the hello).
pub const MAX_HELLO: usize = 4 << 10;

/// Read one frame; `Closed` at a clean end of stream between frames.
pub async fn read<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
) -> Result<T, FrameError> {
    read_limited(reader, MAX_FRAME).await
}

/// Read one frame of at most `limit` bytes (refused before anything is allocated). Reads no
/// byte past the frame.
pub async fn read_limited<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
    limit: usize,
) -> Result<T, FrameError> {
    FrameReader::with_limit(reader, limit).next().await
}

/// A frame reader whose [`FrameReader::next`] is cancel-safe: what a read dropped mid-frame had
/// read stays here (the length prefix, the payload so far), and the next call goes on from it.
/// So `next` may sit in a `select!` beside timers, with no task of its own reading ahead: an
/// idle connection holds four bytes and an empty buffer here, and a reader not called holds
/// the peer back by QUIC's flow control.
pub struct FrameReader<R> {
    recv: R,
    limit: usize,
    prefix: [u8; 4],
    /// Bytes of `prefix` read so far.
    have: usize,
    /// The payload so far, its capacity the frame's size, once the prefix is complete.
    payload: Vec<u8>,
    /// An error ended the frames: every later call says `Closed`, as a reader that stopped.
    failed: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Frames of at most [`MAX_FRAME`] bytes.
    pub fn new(recv: R) -> FrameReader<R> {
        FrameReader::with_limit(recv, MAX_FRAME)
    }

    /// Frames of at most `limit` bytes (a larger one is refused before anything is allocated).
    pub fn with_limit(recv: R, limit: usize) -> FrameReader<R> {
        FrameReader {
            recv,
            limit,
            prefix: [0; 4],
            have: 0,
            payload: Vec::new(),
            failed: false,
        }
    }

    /// The next frame, decoded; `Closed` where the stream ends before a whole length prefix
    /// (between frames, or within the 4 bytes, as `read_exact` said before). Cancel-safe:
    /// each await is one read of tokio's cancel-safe kind, and what it read is kept in `self`.
    /// An error ends the frames (what follows a refused or cut frame is not aligned): every
    /// later call is `Closed`.
    pub async fn next<T: DeserializeOwned>(&mut self) -> Result<T, FrameError> {
        if self.failed {
            return Err(FrameError::Closed);
        }
        let frame = self.frame().await;
        self.failed = frame.is_err();
        frame
    }

    async fn frame<T: DeserializeOwned>(&mut self) -> Result<T, FrameError> {
        while self.have < self.prefix.len() {
            let read = self.recv.read(&mut self.prefix[self.have..]).await?;
            if read == 0 {
                return Err(FrameError::Closed);
            }
            self.have += read;
            if self.have == self.prefix.len() {
                let size = u32::from_be_bytes(self.prefix) as usize;
                if size > self.limit {
                    return Err(FrameError::TooLarge {
                        size,
                        limit: self.limit,
                    });
                }
                self.payload = Vec::with_capacity(size);
            }
        }
        let size = u32::from_be_bytes(self.prefix) as usize;
        while self.payload.len() < size {
            // The payload's spare capacity is exactly what the frame still lacks, so the read
            // takes no more than this frame's bytes.
            if self.recv.read_buf(&mut self.payload).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
        self.have = 0;
        decode(&std::mem::take(&mut self.payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Hello, PROTOCOL_VERSION, Role};

    #[tokio::test]
    async fn round_trip_and_limits() {
        let hello = Hello {
            version: PROTOCOL_VERSION,
            role: Role::Worker,
            token: "t".into(),
        };
        let bytes = encode(&hello).unwrap();
        let back: Hello = read(&mut bytes.as_slice()).await.unwrap();
        assert_eq!(back, hello);

        let mut huge = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        huge.extend_from_slice(&[0; 16]);
        assert!(matches!(
            read::<_, Hello>(&mut huge.as_slice()).await,
            Err(FrameError::TooLarge { .. })
        ));

        let garbage = [0, 0, 0, 3, 0xff, 0xff, 0xff];
        assert!(matches!(
            read::<_, Hello>(&mut garbage.as_slice()).await,
            Err(FrameError::Decode(_))
        ));
        assert!(matches!(
            read::<_, Hello>(&mut [].as_slice()).await,
            Err(FrameError::Closed)
        ));
        // A frame cut short is an i/o error, not a hang or a panic.
        assert!(matches!(
            read::<_, Hello>(&mut bytes[..bytes.len() - 1].as_ref()).await,
            Err(FrameError::Io(_))
        ));
    }

    /// Hands out one byte per read, and says "not yet" (waking itself) before each.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        ready: bool,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if !self.ready {
                self.ready = true;
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            self.ready = false;
            if self.at < self.bytes.len() {
                let at = self.at;
                buf.put_slice(&self.bytes[at..=at]);
                self.at += 1;
            }
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Every `next` dropped after one poll (as a `select!` whose other branch fired drops it):
    /// the frames still come whole and in order, then the clean end.
    #[test]
    fn a_frame_reader_dropped_mid_frame_loses_nothing() {
        let hellos: Vec<Hello> = ["a", "bc", ""]
            .iter()
            .map(|token| Hello {
                version: PROTOCOL_VERSION,
                role: Role::Client,
                token: (*token).into(),
            })
            .collect();
        let bytes = hellos.iter().flat_map(|h| encode(h).unwrap()).collect();
        let mut reader = FrameReader::new(Trickle {
            bytes,
            at: 0,
            ready: false,
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        let mut polls = 0;
        let end = loop {
            polls += 1;
            assert!(
                polls < 10_000,
                "no progress: a dropped read lost what it had read"
            );
            let next = std::pin::pin!(reader.next::<Hello>());
            match std::future::Future::poll(next, &mut cx) {
                std::task::Poll::Ready(Ok(hello)) => got.push(hello),
                std::task::Poll::Ready(Err(end)) => break end,
                std::task::Poll::Pending => {}
            }
        };
        assert!(matches!(end, FrameError::Closed), "{end}");
        assert_eq!(got, hellos);
        assert!(
            polls > 2 * got.len(),
            "each frame took several dropped reads"
        );
    }

    #[tokio::test]
    async fn a_frame_reader_refuses_a_large_frame_and_a_cut_one() {
        let mut large = FrameReader::with_limit(&[0u8, 0, 1, 0, 9][..], 255);
        assert!(matches!(
            large.next::<Hello>().await,
            Err(FrameError::TooLarge {
                size: 256,
                limit: 255
            })
        ));
        // Nothing of the refused frame is read afterwards.
        assert!(matches!(
            large.next::<Hello>().await,
            Err(FrameError::Closed)
        ));
        let cut = encode(&Hello {
            version: PROTOCOL_VERSION,
            role: Role::Worker,
            token: "t".into(),
        })
        .unwrap();
        let mut cut = FrameReader::new(&cut[..cut.len() - 1]);
        assert!(matches!(cut.next::<Hello>().await, Err(FrameError::Io(_))));
        // A prefix cut short is the stream's end, as `read_exact` reported it before.
        let mut prefix_only = FrameReader::new(&[0u8, 0][..]);
        assert!(matches!(
            prefix_only.next::<Hello>().await,
            Err(FrameError::Closed)
        ));
    }
}
