//! Byte payloads (components, task inputs, output) on the wire and in journals: written as
//! serde bytes, not as a sequence of `u8`.
//!
//! postcard writes both as a varint length and then the bytes, so the encoding is the same
//! (the tests below prove it): old journals and peers read as before. What changes is the work:
//! a sequence is visited one element at a time, which for an 18 MB Python condition took 9 s
//! to encode and 4 s to decode in a debug build (tens of ms optimised), long enough to starve
//! the scheduler's loop of heartbeats; bytes are one length check and one copy.
//!
//! Use with `#[serde(with = "weir_proto::bytes::one")]` (any `AsRef<[u8]> + From<Vec<u8>>`,
//! such as `Vec<u8>` or `Arc<[u8]>`), `bytes::list` for a `Vec` of them, `bytes::keyed` for a
//! `Vec<(K, them)>` and `bytes::maybe` for an `Option<Vec<u8>>`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_bytes::{ByteBuf, Bytes};

/// One payload.
pub mod one {
    use super::*;

    pub fn serialize<S: Serializer, B: AsRef<[u8]>>(bytes: &B, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes.as_ref())
    }

    pub fn deserialize<'de, D: Deserializer<'de>, B: From<Vec<u8>>>(d: D) -> Result<B, D::Error> {
        Ok(B::from(ByteBuf::deserialize(d)?.into_vec()))
    }
}

/// A list of payloads.
pub mod list {
    use super::*;

    pub fn serialize<S: Serializer, B: AsRef<[u8]>>(list: &[B], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(|b| Bytes::new(b.as_ref())))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, B: From<Vec<u8>>>(
        d: D,
    ) -> Result<Vec<B>, D::Error> {
        let list = Vec::<ByteBuf>::deserialize(d)?;
        Ok(list.into_iter().map(|b| B::from(b.into_vec())).collect())
    }
}

/// A list of (key, payload), such as components by their hash.
pub mod keyed {
    use super::*;

    pub fn serialize<S: Serializer, K: Serialize, B: AsRef<[u8]>>(
        list: &[(K, B)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(list.iter().map(|(k, b)| (k, Bytes::new(b.as_ref()))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, K: Deserialize<'de>, B: From<Vec<u8>>>(
        d: D,
    ) -> Result<Vec<(K, B)>, D::Error> {
        let list = Vec::<(K, ByteBuf)>::deserialize(d)?;
        Ok(list
            .into_iter()
            .map(|(k, b)| (k, B::from(b.into_vec())))
            .collect())
    }
}

/// A payload that may be absent.
pub mod maybe {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        serde_bytes::serialize(bytes, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        serde_bytes::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde::{Deserialize, Serialize};

    /// The fields as they were, each `u8` an element.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Elements {
        one: Vec<u8>,
        shared: Vec<u8>,
        list: Vec<Vec<u8>>,
        keyed: Vec<(u32, Vec<u8>)>,
        maybe: Option<Vec<u8>>,
        none: Option<Vec<u8>>,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Payloads {
        #[serde(with = "super::one")]
        one: Vec<u8>,
        #[serde(with = "super::one")]
        shared: Arc<[u8]>,
        #[serde(with = "super::list")]
        list: Vec<Vec<u8>>,
        #[serde(with = "super::keyed")]
        keyed: Vec<(u32, Vec<u8>)>,
        #[serde(with = "super::maybe")]
        maybe: Option<Vec<u8>>,
        #[serde(with = "super::maybe")]
        none: Option<Vec<u8>>,
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn payloads_encode_as_the_elements_did_and_read_old_encodings() {
        for len in [0, 1, 127, 128, 300, 70_000] {
            let old = Elements {
                one: sample(len),
                shared: sample(len + 1),
                list: vec![sample(len), vec![], sample(3)],
                keyed: vec![(7, sample(len)), (9, vec![])],
                maybe: Some(sample(len)),
                none: None,
            };
            let new = Payloads {
                one: old.one.clone(),
                shared: Arc::from(old.shared.clone()),
                list: old.list.clone(),
                keyed: old.keyed.clone(),
                maybe: old.maybe.clone(),
                none: None,
            };
            let old_bytes = postcard::to_stdvec(&old).unwrap();
            assert_eq!(
                postcard::to_stdvec(&new).unwrap(),
                old_bytes,
                "length {len}"
            );
            let read: Payloads = postcard::from_bytes(&old_bytes).unwrap();
            assert_eq!(read, new);
            let back: Elements = postcard::from_bytes(&old_bytes).unwrap();
            assert_eq!(back, old);
        }
    }

    #[test]
    fn a_length_past_the_end_is_an_error_not_an_allocation() {
        // A varint length of ~2^32 and 3 bytes.
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3];
        assert!(postcard::from_bytes::<Payloads>(&bytes).is_err());
    }

    #[test]
    fn json_still_reads_payloads_written_as_numbers() {
        let json =
            r#"{"one":[1,2],"shared":[3],"list":[[4]],"keyed":[[1,[5]]],"maybe":[6],"none":null}"#;
        let read: Payloads = serde_json::from_str(json).unwrap();
        assert_eq!(read.one, [1, 2]);
        assert_eq!(&*read.shared, [3]);
        assert_eq!(read.keyed, [(1, vec![5])]);
        assert_eq!(serde_json::to_string(&read).unwrap(), json);
    }
}
