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

/// Read one frame of at most `limit` bytes (refused before anything is allocated).
pub async fn read_limited<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
    limit: usize,
) -> Result<T, FrameError> {
    let mut prefix = [0u8; 4];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let size = u32::from_be_bytes(prefix) as usize;
    if size > limit {
        return Err(FrameError::TooLarge { size, limit });
    }
    let mut payload = vec![0u8; size];
    reader.read_exact(&mut payload).await?;
    decode(&payload)
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
}
