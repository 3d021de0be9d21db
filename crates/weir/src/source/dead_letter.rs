//! The dead-letter file of a source: rejected messages, their error and their position, one JSON
//! object a line.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use base64::Engine as _;

use super::meta::Position;

/// Appends the rejected messages of a source to a JSON-lines file.
#[derive(Debug)]
pub(crate) struct DeadLetterFile {
    path: PathBuf,
    out: Mutex<BufWriter<File>>,
}

impl DeadLetterFile {
    /// Opens (appending) or creates `path`.
    pub(crate) fn open(path: PathBuf) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        Ok(Self {
            path,
            out: Mutex::new(BufWriter::new(f)),
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Appends a message that could not be decoded.
    pub(crate) fn write(
        &self,
        source: &str,
        pos: &Position<'_>,
        error: &str,
        message: &[u8],
    ) -> std::io::Result<()> {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let line = match *pos {
            Position::File { file, offset } => serde_json::json!({
                "source": source,
                "file": file,
                "offset": offset,
                "error": error,
                "message_base64": b64(message),
            }),
            Position::Kafka {
                topic,
                partition,
                offset,
                timestamp,
                key,
                ..
            } => serde_json::json!({
                "source": source,
                "topic": topic,
                "partition": partition,
                "offset": offset,
                "timestamp": timestamp,
                "key_base64": key.map(b64),
                "error": error,
                "message_base64": b64(message),
            }),
        };
        self.append(&line)
    }

    /// Appends decoded rows that came behind the watermark: each with its position (fields of
    /// `position`), why it is late, and the row as JSON.
    pub(crate) fn write_late(
        &self,
        source: &str,
        rows: impl IntoIterator<Item = (serde_json::Value, String, serde_json::Value)>,
    ) -> std::io::Result<()> {
        for (position, error, row) in rows {
            let mut line = serde_json::json!({ "source": source });
            if let (Some(l), serde_json::Value::Object(p)) = (line.as_object_mut(), position) {
                l.extend(p);
                l.insert("error".into(), error.into());
                l.insert("row".into(), row);
            }
            self.append(&line)?;
        }
        Ok(())
    }

    fn append(&self, line: &serde_json::Value) -> std::io::Result<()> {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::to_writer(&mut *out, line)?;
        out.write_all(b"\n")?;
        // Dead letters are rare and must survive a crash of the run that wrote them.
        out.flush()
    }
}
