//! What the state's database holds, and how it is encoded: the column families, the keys of the
//! step records, and the checkpoint record's bytes.

use std::path::Path;

use rocksdb::DB;
use xxhash_rust::xxh3::xxh3_64;

use super::stats::{Counters, TICKERS};
use crate::DedupError;

/// The column family of the dedup keys and the step records.
pub(super) const KEYS: &str = "keys";
/// The column family of what is fixed for a directory's life (`SETUP`).
pub(super) const META: &str = "meta";
/// The dedup settings the directory was created with, in `META`.
pub(super) const SETUP: &[u8] = b"setup";
/// The checkpoint record's format. 3 ends the record with the operator state; a format 2
/// record is the same without it, and reads as an empty state.
const FORMAT: u8 = 3;
/// The format before the operator state.
const FORMAT_2: u8 = 2;
/// The largest checkpoint record: RocksDB takes values up to 3 GiB (and a table file's block
/// stores an entry's length in 32 bits).
pub(super) const MAX_RECORD: usize = 3 << 30;
/// Format 1 kept the checkpoint in the `meta` column family under this key.
pub(super) const FORMAT_1_CHECKPOINT: &[u8] = b"checkpoint";
/// The prefix of the step records (the checkpoint and the committed file names) in the `keys`
/// column family, where they are committed in the same file as the step's keys. No dedup key
/// starts with it: hashed keys are exactly 16 bytes long, raw keys start with 0 or 1. And it
/// sorts after every dedup key, so the records close each step's sorted table file.
pub(super) const RECORD: [u8; 17] = [0xFF; 17];

fn record_key(name: &[u8]) -> Vec<u8> {
    [&RECORD[..], name].concat()
}

pub(super) fn checkpoint_key() -> Vec<u8> {
    record_key(b"checkpoint")
}

pub(super) fn file_prefix() -> Vec<u8> {
    record_key(b"file/")
}

/// The record of a file the step `step` committed: `<file prefix><20-digit step>/<name>`, so the
/// files list oldest step first.
pub(super) fn file_key(step: u64, name: &str) -> Vec<u8> {
    [file_prefix(), format!("{step:020}/{name}").into_bytes()].concat()
}

/// The file name in a file record's key, given the key past the file prefix.
pub(super) fn file_name(rest: &[u8]) -> Option<&[u8]> {
    rest.get(21..)
}

/// What one commit records: how far each source partition has been read, the output files
/// this step completed, and the operator state to resume from.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Commits so far (the first commit is step 1).
    pub step: u64,
    /// The next position to read of each source partition, by a name the engine chooses (for
    /// example `kafka/quotes/3` or `file:/data/q.bin`).
    pub positions: Vec<(String, i64)>,
    /// The files the step committed, as their final names.
    pub files: Vec<String>,
    /// Operator state: opaque bytes the engine commits with the step, for example the open
    /// windows of a continuous query; empty when there is none.
    pub state: Vec<u8>,
}

/// Shows the state's size, not its bytes (it can be megabytes).
impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("step", &self.step)
            .field("positions", &self.positions)
            .field("files", &self.files)
            .field("state", &format_args!("{} bytes", self.state.len()))
            .finish()
    }
}

/// The last checkpoint, the largest event time, the counters (defaults before a commit), and a
/// hash of the checkpoint record that names this exact committed state.
pub(super) fn read_checkpoint(
    db: &DB,
    dir: &Path,
) -> Result<(Checkpoint, i64, Counters, u64), DedupError> {
    let keys = db
        .cf_handle(KEYS)
        .ok_or_else(|| DedupError::Corrupt("the keys column family is missing".into()))?;
    match db
        .get_cf(keys, checkpoint_key())
        .map_err(|e| DedupError::db(dir, "read the checkpoint", e))?
    {
        Some(bytes) => {
            let (c, t, n) = decode_checkpoint(&bytes).ok_or_else(|| {
                DedupError::Corrupt(format!(
                    "the checkpoint record in {} cannot be read",
                    dir.display()
                ))
            })?;
            Ok((c, t, n, xxh3_64(&bytes)))
        }
        None => Ok((Checkpoint::default(), i64::MIN, Counters::default(), 0)),
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The checkpoint record: the format, the step, the largest event time, the positions (each a
/// name and a position) and the files, each list after its length; the counters; then the
/// operator state after its length (8 bytes). Numbers are little-endian, names length-prefixed.
pub(super) fn encode_checkpoint(c: &Checkpoint, max_time: i64, counters: &Counters) -> Vec<u8> {
    // Sized up front: the state can be megabytes, and growing would copy it over and over.
    let names: usize = c.positions.iter().map(|(n, _)| 12 + n.len()).sum::<usize>()
        + c.files.iter().map(|f| 4 + f.len()).sum::<usize>();
    let mut out =
        Vec::with_capacity(1 + 8 + 8 + 4 + 4 + names + 8 * (6 + TICKERS.len()) + 8 + c.state.len());
    out.push(FORMAT);
    out.extend_from_slice(&c.step.to_le_bytes());
    out.extend_from_slice(&max_time.to_le_bytes());
    out.extend_from_slice(&(c.positions.len() as u32).to_le_bytes());
    for (name, pos) in &c.positions {
        put_str(&mut out, name);
        out.extend_from_slice(&pos.to_le_bytes());
    }
    out.extend_from_slice(&(c.files.len() as u32).to_le_bytes());
    for f in &c.files {
        put_str(&mut out, f);
    }
    for v in [
        counters.rows,
        counters.dropped,
        counters.recent_hits,
        counters.lookups,
        counters.written,
        counters.expired,
    ]
    .iter()
    .chain(counters.tickers.iter())
    {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(c.state.len() as u64).to_le_bytes());
    out.extend_from_slice(&c.state);
    out
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let (s, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(s)
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.bytes(n)?.to_vec()).ok()
    }
}

fn decode_checkpoint(bytes: &[u8]) -> Option<(Checkpoint, i64, Counters)> {
    let mut r = Reader(bytes);
    let [format] = r.take::<1>()?;
    if format != FORMAT && format != FORMAT_2 {
        return None;
    }
    let step = r.u64()?;
    let max_time = r.u64()? as i64;
    let mut positions = Vec::new();
    for _ in 0..r.u32()? {
        let name = r.string()?;
        positions.push((name, r.u64()? as i64));
    }
    let mut files = Vec::new();
    for _ in 0..r.u32()? {
        files.push(r.string()?);
    }
    let mut counters = Counters {
        rows: r.u64()?,
        dropped: r.u64()?,
        recent_hits: r.u64()?,
        lookups: r.u64()?,
        written: r.u64()?,
        expired: r.u64()?,
        tickers: [0; TICKERS.len()],
    };
    for t in counters.tickers.iter_mut() {
        *t = r.u64()?;
    }
    let state = if format == FORMAT_2 {
        Vec::new()
    } else {
        let n = usize::try_from(r.u64()?).ok()?;
        r.bytes(n)?.to_vec()
    };
    Some((
        Checkpoint {
            step,
            positions,
            files,
            state,
        },
        max_time,
        counters,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(state: Vec<u8>) -> Checkpoint {
        Checkpoint {
            step: 7,
            positions: vec![("kafka/quotes/3".into(), 42), ("file:/q.bin".into(), -1)],
            files: vec!["part-7.parquet".into()],
            state,
        }
    }

    fn counters() -> Counters {
        let mut c = Counters {
            rows: 10,
            dropped: 2,
            expired: 1,
            ..Counters::default()
        };
        c.tickers[3] = 99;
        c
    }

    #[test]
    fn the_record_round_trips_with_and_without_a_state() {
        for state in [Vec::new(), b"open windows".to_vec(), vec![0xFF; 100_000]] {
            let c = checkpoint(state);
            let bytes = encode_checkpoint(&c, 1234, &counters());
            assert_eq!(bytes[0], FORMAT);
            let (back, max_time, n) = decode_checkpoint(&bytes).unwrap();
            assert_eq!(back, c);
            assert_eq!(max_time, 1234);
            assert_eq!((n.rows, n.dropped, n.expired), (10, 2, 1));
            assert_eq!(n.tickers[3], 99);
            // A record cut anywhere in the state does not read.
            assert!(decode_checkpoint(&bytes[..bytes.len() - 1]).is_none());
        }
    }

    #[test]
    fn a_format_2_record_reads_with_an_empty_state() {
        // Format 2 is format 3 without the state's length and bytes.
        let c = checkpoint(Vec::new());
        let mut bytes = encode_checkpoint(&c, 5, &counters());
        bytes.truncate(bytes.len() - 8);
        bytes[0] = FORMAT_2;
        let (back, max_time, n) = decode_checkpoint(&bytes).unwrap();
        assert_eq!(back, c);
        assert_eq!((max_time, n.rows), (5, 10));
        bytes[0] = 1;
        assert!(decode_checkpoint(&bytes).is_none());
        bytes[0] = 4;
        assert!(decode_checkpoint(&bytes).is_none());
    }
}
