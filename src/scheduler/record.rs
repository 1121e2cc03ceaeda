//! The journal's on-disk format: the file header, the records, and their framing with
//! checksums (see `journal.rs` for what is written when). Pure: bytes in, records out, so the
//! decoder is fuzzed on its own (`fuzz/fuzz_targets/journal_decode.rs`).

/// The first bytes of every journal.
pub const MAGIC: &[u8; 8] = b"WEIRJRNL";

/// What a file of this format holds: its records' type, named by the file's first eight bytes
/// (the scheduler's journal: [`Record`]; a replica's Raft log has its own).
pub trait Framed: serde::Serialize + serde::de::DeserializeOwned {
    const MAGIC: &'static [u8; 8];
    /// What such a file is, in errors ("a weir journal").
    const WHAT: &'static str;
}

impl Framed for Record {
    const MAGIC: &'static [u8; 8] = MAGIC;
    const WHAT: &'static str = "a weir journal";
}
/// This build's format (1 had no header and no checksums).
pub const FORMAT: u32 = 2;
pub const HEADER: usize = 12;
/// A record's header: its payload's length (u32), its sequence number (u64, from 0 in each
/// file), the CRC-32C of those 12 bytes, and the CRC-32C of the payload (all little endian).
pub const RECORD_HEADER: usize = 20;

pub use crate::core::record::Record;

/// The records of a journal's bytes, and how many bytes are intact (the rest is a torn tail:
/// a record cut short by a crash, or zeros where unsynced blocks were). Any other damage is an
/// error naming the offset: a checksum that does not match, a record that does not decode, or a
/// sequence number out of order (records reordered, duplicated or dropped).
pub fn parse(bytes: &[u8]) -> Result<(Vec<Record>, usize), String> {
    parse_as::<Record>(bytes)
}

/// [`parse`] of a file of `R`s.
pub fn parse_as<R: Framed>(bytes: &[u8]) -> Result<(Vec<R>, usize), String> {
    if bytes.is_empty() {
        return Ok((Vec::new(), 0));
    }
    if bytes.len() < HEADER || &bytes[..8] != R::MAGIC {
        let magic = String::from_utf8_lossy(R::MAGIC);
        return Err(format!(
            "not {} (it does not start with a {magic} header; journals of weir before format 2 \
             have none and cannot be read by this version); refusing to touch it",
            R::WHAT
        ));
    }
    let format = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if format != FORMAT {
        return Err(format!(
            "journal format {format}; this scheduler reads format {FORMAT}"
        ));
    }
    let mut records = Vec::new();
    let mut at = HEADER;
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < RECORD_HEADER - 4 {
            return Ok((records, at)); // a header cut short by a crash mid-write
        }
        let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
        let size = word(0);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&rest[4..12]);
        let seq = u64::from_le_bytes(seq);
        if crc32c::crc32c(&rest[..12]) != word(12) {
            if rest.iter().all(|b| *b == 0) {
                return Ok((records, at)); // blocks never synced, zero-filled after a power loss
            }
            return Err(format!(
                "record at offset {at} is damaged (its header's checksum does not match)"
            ));
        }
        if seq != records.len() as u64 {
            return Err(format!(
                "record at offset {at} is out of order (number {seq}, expected {}): records were \
                 reordered, duplicated or dropped",
                records.len()
            ));
        }
        if rest.len() < RECORD_HEADER {
            return Ok((records, at));
        }
        let Some(payload) = rest.get(RECORD_HEADER..RECORD_HEADER + size as usize) else {
            return Ok((records, at)); // cut short by a crash mid-write
        };
        if crc32c::crc32c(payload) != word(16) {
            return Err(format!(
                "record at offset {at} is damaged (its checksum does not match)"
            ));
        }
        let record = postcard::from_bytes::<R>(payload)
            .map_err(|e| format!("record at offset {at} does not decode: {e}"))?;
        records.push(record);
        at += RECORD_HEADER + size as usize;
    }
    Ok((records, at))
}

/// Record `seq` (its place in the file, from 0) as written: header, then payload.
pub fn encode<R: serde::Serialize>(record: &R, seq: u64) -> Result<Vec<u8>, String> {
    let mut bytes = postcard::to_extend(record, vec![0u8; RECORD_HEADER])
        .map_err(|e| format!("cannot encode a record: {e}"))?;
    let size = u32::try_from(bytes.len() - RECORD_HEADER)
        .map_err(|_| format!("a record of {} bytes is over 4 GiB", bytes.len()))?;
    bytes[..4].copy_from_slice(&size.to_le_bytes());
    bytes[4..12].copy_from_slice(&seq.to_le_bytes());
    let header_crc = crc32c::crc32c(&bytes[..12]);
    bytes[12..16].copy_from_slice(&header_crc.to_le_bytes());
    let payload_crc = crc32c::crc32c(&bytes[RECORD_HEADER..]);
    bytes[16..20].copy_from_slice(&payload_crc.to_le_bytes());
    Ok(bytes)
}

pub fn header() -> [u8; HEADER] {
    header_of::<Record>()
}

/// The header of a file of `R`s.
pub fn header_of<R: Framed>() -> [u8; HEADER] {
    let mut header = [0u8; HEADER];
    header[..8].copy_from_slice(R::MAGIC);
    header[8..].copy_from_slice(&FORMAT.to_le_bytes());
    header
}
