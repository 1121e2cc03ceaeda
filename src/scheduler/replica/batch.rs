//! A Raft log entry: one leader round's journal records ([`Batch`]), cut as they are appended
//! ([`Batches`]) so that no entry grows far past a few MiB.

use serde::{Deserialize, Serialize};

use crate::scheduler::journal::Record;

/// One leader round's journal records (postcard of a `Vec<Record>`): a Raft log entry.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Batch(#[serde(with = "crate::proto::bytes::one")] pub Vec<u8>);

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Batch({} bytes)", self.0.len())
    }
}

impl std::fmt::Display for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes of records", self.0.len())
    }
}

/// A round's records as they are appended, cut into entries of about [`BATCH_BYTES`].
#[derive(Default)]
pub(crate) struct Batches {
    done: Vec<Batch>,
    count: u64,
    bytes: Vec<u8>,
}

/// An entry is closed once its records pass this size (a record is never split).
const BATCH_BYTES: usize = 4 << 20;

impl Batches {
    pub(crate) fn push(&mut self, record: &Record) -> Result<(), String> {
        self.bytes = postcard::to_extend(record, std::mem::take(&mut self.bytes))
            .map_err(|e| format!("cannot encode a record: {e}"))?;
        self.count += 1;
        if self.bytes.len() >= BATCH_BYTES {
            self.close();
        }
        Ok(())
    }

    fn close(&mut self) {
        if self.count == 0 {
            return;
        }
        // postcard's `Vec`: its length (a varint), then its elements.
        let mut batch = Vec::with_capacity(10 + self.bytes.len());
        let mut n = self.count;
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                batch.push(byte);
                break;
            }
            batch.push(byte | 0x80);
        }
        batch.append(&mut self.bytes);
        self.done.push(Batch(batch));
        self.count = 0;
    }

    /// The entries of the round (none without records).
    pub(crate) fn take(&mut self) -> Vec<Batch> {
        self.close();
        std::mem::take(&mut self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::replica::decode;

    #[test]
    fn a_round_s_records_decode_as_one_vec_whatever_their_number() {
        for n in [1usize, 5, 127, 128, 300] {
            let mut batches = Batches::default();
            for job in 0..n {
                batches
                    .push(&Record::Forget { job: job as u64 })
                    .expect("encodes");
            }
            let taken = batches.take();
            assert_eq!(taken.len(), 1);
            let records = decode(&taken).expect("decodes");
            assert_eq!(records.len(), n);
            assert!(matches!(records[n - 1], Record::Forget { job } if job == n as u64 - 1));
        }
        assert!(Batches::default().take().is_empty());
    }
}
