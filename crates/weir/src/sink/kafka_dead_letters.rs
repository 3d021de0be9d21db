//! The dead-letter file of a `kafka` sink written one transaction a step, with each refused row
//! in it once.
//!
//! Before a step's state commit its refused rows are written to `<file>.pending` (synced), and
//! the state commit records where they go in the dead-letter file: the file's length before
//! them, their length and their CRC-32. Once the step's transaction commits they are appended
//! to the file. A start finds them there (the bytes at that offset match), or puts them there
//! from the pending file: the file cut at the offset, then the rows appended. A step written
//! again (after a stop before its state commit, or a lost broker connection) refuses its rows
//! again, and only that last refusal is kept. So a stop at any moment neither loses nor repeats
//! a line.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::SinkError;

/// What a state commit records of a step's refused rows: this prefix, then
/// `<offset in the dead-letter file>:<length>:<CRC-32>`.
const PREFIX: &str = "kafka-dead-letters:";

/// Where a step's refused rows wait for its commit: beside the dead-letter file.
pub(crate) fn pending_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".pending");
    PathBuf::from(name)
}

/// Writes `lines` (a step's refused rows) to the pending file of `path` until they are on disk,
/// and returns the record that the step's state commit keeps: they go at `offset`.
pub(crate) fn prepare(path: &Path, offset: u64, lines: &[u8]) -> Result<String, SinkError> {
    let pending = pending_path(path);
    std::fs::File::create(&pending)
        .and_then(|mut f| f.write_all(lines).and_then(|()| f.sync_data()))
        .map_err(|source| SinkError::Io {
            path: pending.display().to_string(),
            source,
        })?;
    Ok(format!(
        "{PREFIX}{offset}:{}:{}",
        lines.len(),
        crc32fast::hash(lines)
    ))
}

/// Where the last step's refused rows go, from the records of its state commit.
struct Placement {
    offset: u64,
    len: u64,
    crc: u32,
}

fn placement(sink: &str, records: &[String]) -> Result<Option<Placement>, SinkError> {
    let Some(record) = records.iter().find_map(|r| r.strip_prefix(PREFIX)) else {
        return Ok(None);
    };
    let mut parts = record.split(':');
    let (offset, len, crc) = (parts.next(), parts.next(), parts.next());
    match (
        offset.and_then(|o| o.parse().ok()),
        len.and_then(|l| l.parse().ok()),
        crc.and_then(|c| c.parse().ok()),
    ) {
        (Some(offset), Some(len), Some(crc)) => Ok(Some(Placement { offset, len, crc })),
        _ => Err(SinkError::Options(format!(
            "sink {sink}: the state records its dead letters as '{record}', not \
             '<offset>:<length>:<crc>'; was it written by another program?"
        ))),
    }
}

/// Puts the dead-letter file `path` back to what the state's last step committed (`records`,
/// the step's records): its refused rows at their offset and nothing after them. Nothing to do
/// when that step refused no row. A file shorter than the offset (moved away, or rotated)
/// keeps what it has and gets the rows at its end.
pub(crate) fn restore(
    sink: &str,
    path: Option<&Path>,
    records: &[String],
) -> Result<(), SinkError> {
    let Some(at) = placement(sink, records)? else {
        return Ok(());
    };
    let Some(path) = path else {
        tracing::warn!(
            sink,
            "the state's last step refused rows for a dead-letter file, and the sink has none \
             now ('on.error'); they are not written"
        );
        return Ok(());
    };
    let io = |source| SinkError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let end = at.offset.saturating_add(at.len);
    if file_len >= end {
        let mut there = Vec::new();
        file.seek(SeekFrom::Start(at.offset)).map_err(io)?;
        (&mut file)
            .take(at.len)
            .read_to_end(&mut there)
            .map_err(io)?;
        if crc32fast::hash(&there) == at.crc {
            // Appended before the stop; only a torn append of a step never committed follows.
            if file_len > end {
                file.set_len(end)
                    .and_then(|()| file.sync_data())
                    .map_err(io)?;
            }
            return Ok(());
        }
    }
    let pending_file = pending_path(path);
    let pending = match std::fs::read(&pending_file) {
        Ok(p) => Some(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(SinkError::Io {
                path: pending_file.display().to_string(),
                source,
            })
        }
    };
    match pending {
        Some(lines) if lines.len() as u64 == at.len && crc32fast::hash(&lines) == at.crc => {
            let cut = file_len.min(at.offset);
            file.set_len(cut)
                .and_then(|()| file.seek(SeekFrom::Start(cut)))
                .and_then(|_| file.write_all(&lines))
                .and_then(|()| file.sync_data())
                .map_err(io)
        }
        _ => {
            tracing::warn!(
                sink,
                file = %path.display(),
                pending = %pending_file.display(),
                "the refused rows of the state's last step are in neither file (were the files \
                 changed since?); they cannot be written again"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(r: String) -> Vec<String> {
        vec!["kafka-transaction:t:1:0".into(), r]
    }

    #[test]
    fn a_start_puts_back_the_last_steps_rows_once_whatever_the_file_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.jsonl");
        let before = b"{\"row\":1}\n";
        let step = b"{\"row\":2}\n{\"row\":3}\n";
        let whole = [&before[..], &step[..]].concat();
        std::fs::write(&path, before).unwrap();
        let r = records(prepare(&path, before.len() as u64, step).unwrap());
        // Stopped before the append, after it, after it and a torn line, in the middle of it.
        for file in [
            before.to_vec(),
            whole.clone(),
            [&whole[..], b"{\"ro"].concat(),
            [&before[..], &step[..5]].concat(),
        ] {
            std::fs::write(&path, &file).unwrap();
            restore("out", Some(&path), &r).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), whole);
        }
        // Moved away: a new file gets the rows.
        std::fs::remove_file(&path).unwrap();
        restore("out", Some(&path), &r).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), step);
        // No record: the file is left as it is.
        std::fs::write(&path, b"anything").unwrap();
        restore("out", Some(&path), &["kafka-transaction:t:1:0".into()]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"anything");
        // Neither file holds the rows: left as it is, not made up.
        std::fs::write(&path, before).unwrap();
        std::fs::write(pending_path(&path), b"other").unwrap();
        restore("out", Some(&path), &r).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        let bad = restore("out", Some(&path), &records("kafka-dead-letters:x".into()));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("<offset>:<length>:<crc>"));
    }
}
