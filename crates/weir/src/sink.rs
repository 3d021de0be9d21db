//! Sinks: where query results go. `parquet` and `ipc` write files; `stdout` prints JSON lines or
//! a table. The same writers serve `weir run --output` and `weir decode --output`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::{FileWriter, StreamWriter};
use arrow::json::LineDelimitedWriter;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use weir_codec::{Encoder, Options};

use crate::source::framing::Framing;

/// A sink could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// A file could not be created or written.
    #[error("cannot write {path}: {error}")]
    Io {
        /// The file ("stdout" for standard output).
        path: String,
        /// The cause.
        error: String,
    },
    /// An option is missing or wrong.
    #[error("{0}")]
    Options(String),
    /// A second query wrote rows of another shape into the same sink.
    #[error("the rows have columns ({found}) but this sink was opened with ({expected})")]
    SchemaChanged {
        /// The first schema's columns.
        expected: String,
        /// The new one's.
        found: String,
    },
}

/// How a sink writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFormat {
    /// Apache Parquet.
    Parquet,
    /// Arrow IPC file format (`.arrow`).
    IpcFile,
    /// Arrow IPC stream format.
    IpcStream,
    /// One JSON object per row.
    JsonLines,
    /// A text table.
    Table,
}

impl SinkFormat {
    /// The format a file name suggests: `.parquet`, `.arrow`/`.ipc`/`.feather`, `.arrows`,
    /// `.jsonl`/`.json`/`.ndjson`; anything else is an error.
    pub fn from_path(path: &Path) -> Result<Self, SinkError> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        match ext.as_str() {
            "parquet" => Ok(Self::Parquet),
            "arrow" | "ipc" | "feather" => Ok(Self::IpcFile),
            "arrows" => Ok(Self::IpcStream),
            "jsonl" | "json" | "ndjson" => Ok(Self::JsonLines),
            "txt" => Ok(Self::Table),
            _ => Err(SinkError::Options(format!(
                "cannot tell the format of {} from its extension: use .parquet, .arrow, .arrows, .jsonl or .txt",
                path.display()
            ))),
        }
    }
}

impl FromStr for SinkFormat {
    type Err = SinkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "parquet" => Ok(Self::Parquet),
            "ipc" | "arrow" => Ok(Self::IpcFile),
            "ipc_stream" | "arrows" => Ok(Self::IpcStream),
            "jsonl" | "json" => Ok(Self::JsonLines),
            "table" => Ok(Self::Table),
            _ => Err(SinkError::Options(format!(
                "unknown format '{s}': expected parquet, ipc, ipc_stream, jsonl or table"
            ))),
        }
    }
}

/// Writes batches somewhere; [`BatchWriter::finish`] must be called to complete the output.
pub trait BatchWriter: Send {
    /// Writes one batch.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError>;
    /// Completes the output (file footers, a buffered table).
    fn finish(&mut self) -> Result<(), SinkError>;
}

/// Where a writer's bytes go.
pub enum Target {
    /// A file, created (or truncated).
    File(PathBuf),
    /// Standard output.
    Stdout,
}

impl Target {
    fn name(&self) -> String {
        match self {
            Self::File(p) => p.display().to_string(),
            Self::Stdout => "stdout".into(),
        }
    }

    fn open(&self) -> Result<Box<dyn Write + Send>, SinkError> {
        match self {
            Self::File(p) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| io(self, e))?;
                }
                let f = File::create(p).map_err(|e| io(self, e))?;
                Ok(Box::new(BufWriter::with_capacity(1 << 20, f)))
            }
            Self::Stdout => Ok(Box::new(std::io::stdout())),
        }
    }
}

fn io(target: &Target, error: impl std::fmt::Display) -> SinkError {
    SinkError::Io {
        path: target.name(),
        error: error.to_string(),
    }
}

/// Opens a writer of `format` for rows of `schema`. Parquet reads `'compression'`
/// (`zstd`, the default, `snappy` or `none`) and `'row_group_size'` (1,048,576 rows).
pub fn open_writer(
    format: SinkFormat,
    target: Target,
    schema: &SchemaRef,
    options: &Options,
    streaming: bool,
) -> Result<Box<dyn BatchWriter>, SinkError> {
    let out = target.open()?;
    Ok(match format {
        SinkFormat::Parquet => {
            let compression = match options.get("compression").unwrap_or("zstd") {
                "zstd" => Compression::ZSTD(ZstdLevel::default()),
                "snappy" => Compression::SNAPPY,
                "none" | "uncompressed" => Compression::UNCOMPRESSED,
                other => {
                    return Err(SinkError::Options(format!(
                        "'compression' = '{other}': expected 'zstd', 'snappy' or 'none'"
                    )))
                }
            };
            let mut props = WriterProperties::builder().set_compression(compression);
            if let Some(n) = options.get("row_group_size") {
                let n: usize = n.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    SinkError::Options(format!(
                        "'row_group_size' = '{n}': expected a positive number"
                    ))
                })?;
                props = props.set_max_row_group_row_count(Some(n));
            }
            let writer = ArrowWriter::try_new(out, schema.clone(), Some(props.build()))
                .map_err(|e| io(&target, e))?;
            Box::new(ParquetSink {
                writer: Some(writer),
                target,
            })
        }
        SinkFormat::IpcFile => Box::new(IpcFileSink {
            writer: Some(FileWriter::try_new(out, schema).map_err(|e| io(&target, e))?),
            target,
        }),
        SinkFormat::IpcStream => Box::new(IpcStreamSink {
            writer: Some(StreamWriter::try_new(out, schema).map_err(|e| io(&target, e))?),
            target,
        }),
        SinkFormat::JsonLines => Box::new(JsonSink {
            writer: Some(LineDelimitedWriter::new(out)),
            target,
            streaming,
        }),
        SinkFormat::Table => Box::new(TableSink {
            out,
            batches: Vec::new(),
            schema: schema.clone(),
            streaming,
            target,
        }),
    })
}

struct ParquetSink {
    writer: Option<ArrowWriter<Box<dyn Write + Send>>>,
    target: Target,
}

impl BatchWriter for ParquetSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some(w) => w.write(batch).map_err(|e| io(&self.target, e)),
            None => Err(io(&self.target, "written after finish")),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(w) = self.writer.take() {
            let mut out = w.into_inner().map_err(|e| io(&self.target, e))?;
            out.flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

struct IpcFileSink {
    writer: Option<FileWriter<Box<dyn Write + Send>>>,
    target: Target,
}

impl BatchWriter for IpcFileSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some(w) => w.write(batch).map_err(|e| io(&self.target, e)),
            None => Err(io(&self.target, "written after finish")),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut w) = self.writer.take() {
            w.finish().map_err(|e| io(&self.target, e))?;
            w.get_mut().flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

struct IpcStreamSink {
    writer: Option<StreamWriter<Box<dyn Write + Send>>>,
    target: Target,
}

impl BatchWriter for IpcStreamSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some(w) => {
                w.write(batch).map_err(|e| io(&self.target, e))?;
                // A stream is read while it is written: make each batch visible.
                w.get_mut().flush().map_err(|e| io(&self.target, e))
            }
            None => Err(io(&self.target, "written after finish")),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut w) = self.writer.take() {
            w.finish().map_err(|e| io(&self.target, e))?;
            w.get_mut().flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

struct JsonSink {
    writer: Option<LineDelimitedWriter<Box<dyn Write + Send>>>,
    target: Target,
    streaming: bool,
}

impl BatchWriter for JsonSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some(w) => {
                w.write(batch).map_err(|e| io(&self.target, e))?;
                if self.streaming {
                    w.get_mut().flush().map_err(|e| io(&self.target, e))?;
                }
                Ok(())
            }
            None => Err(io(&self.target, "written after finish")),
        }
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if let Some(mut w) = self.writer.take() {
            w.finish().map_err(|e| io(&self.target, e))?;
            w.get_mut().flush().map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }
}

struct TableSink {
    out: Box<dyn Write + Send>,
    batches: Vec<RecordBatch>,
    schema: SchemaRef,
    streaming: bool,
    target: Target,
}

impl TableSink {
    fn print(&mut self) -> Result<(), SinkError> {
        let batches = std::mem::take(&mut self.batches);
        let text = if batches.is_empty() {
            arrow::util::pretty::pretty_format_batches_with_schema(self.schema.clone(), &[])
                .map(|t| t.to_string())
        } else {
            arrow::util::pretty::pretty_format_batches(&batches).map(|t| t.to_string())
        }
        .map_err(|e| io(&self.target, e))?;
        writeln!(self.out, "{text}").map_err(|e| io(&self.target, e))?;
        self.out.flush().map_err(|e| io(&self.target, e))
    }
}

impl BatchWriter for TableSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.batches.push(batch.clone());
        if self.streaming {
            self.print()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        if !self.streaming || !self.batches.is_empty() {
            self.print()?;
        }
        Ok(())
    }
}

/// Writes each row as one framed message, encoded by an [`Encoder`] (the `file` sink).
pub struct MessageFileSink {
    encoder: Box<dyn Encoder>,
    framing: Framing,
    out: Box<dyn Write + Send>,
    messages: Vec<u8>,
    ends: Vec<usize>,
    target: Target,
}

impl MessageFileSink {
    /// A sink writing to `target` (created or truncated).
    pub fn open(
        encoder: Box<dyn Encoder>,
        framing: Framing,
        target: Target,
    ) -> Result<Self, SinkError> {
        Ok(Self {
            encoder,
            framing,
            out: target.open()?,
            messages: Vec::new(),
            ends: Vec::new(),
            target,
        })
    }
}

impl BatchWriter for MessageFileSink {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.messages.clear();
        self.ends.clear();
        self.encoder
            .encode_batch(batch, &mut self.messages, &mut self.ends)
            .map_err(|e| io(&self.target, e))?;
        let mut start = 0;
        for &end in &self.ends {
            let m = &self.messages[start..end];
            start = end;
            match self.framing {
                Framing::Varint => {
                    let (header, n) = varint(m.len() as u64);
                    self.out.write_all(&header[..n])
                }
                Framing::U32Be => {
                    let len = u32::try_from(m.len())
                        .map_err(|_| io(&self.target, "message larger than 4 GiB"))?;
                    self.out.write_all(&len.to_be_bytes())
                }
                Framing::Lines if memchr::memchr(b'\n', m).is_some() => {
                    return Err(io(
                        &self.target,
                        "a message contains a newline; use 'framing' = 'varint' or 'u32be'",
                    ))
                }
                Framing::Lines => Ok(()),
            }
            .and_then(|_| self.out.write_all(m))
            .and_then(|_| match self.framing {
                Framing::Lines => self.out.write_all(b"\n"),
                _ => Ok(()),
            })
            .map_err(|e| io(&self.target, e))?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        self.out.flush().map_err(|e| io(&self.target, e))
    }
}

/// A base-128 varint in a stack buffer (no allocation per message).
fn varint(mut v: u64) -> ([u8; 10], usize) {
    let mut b = [0u8; 10];
    let mut n = 0;
    loop {
        if v < 0x80 {
            b[n] = v as u8;
            return (b, n + 1);
        }
        b[n] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("t", DataType::Utf8, false),
            Field::new("n", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(Int64Array::from(vec![Some(1), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn parquet_and_ipc_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let b = batch();
        for (name, format) in [
            ("x.parquet", SinkFormat::Parquet),
            ("x.arrow", SinkFormat::IpcFile),
        ] {
            let path = dir.path().join(name);
            assert_eq!(SinkFormat::from_path(&path).unwrap(), format);
            let mut w = open_writer(
                format,
                Target::File(path.clone()),
                &b.schema(),
                &Options::default(),
                false,
            )
            .unwrap();
            w.write(&b).unwrap();
            w.write(&b).unwrap();
            w.finish().unwrap();
            let rows: usize = match format {
                SinkFormat::Parquet => {
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                        File::open(&path).unwrap(),
                    )
                    .unwrap()
                    .build()
                    .unwrap()
                    .map(|b| b.unwrap().num_rows())
                    .sum()
                }
                _ => arrow::ipc::reader::FileReader::try_new(File::open(&path).unwrap(), None)
                    .unwrap()
                    .map(|b| b.unwrap().num_rows())
                    .sum(),
            };
            assert_eq!(rows, 4, "{name}");
        }
        assert!(SinkFormat::from_path(Path::new("x.csv")).is_err());
        let bad = Options::new([("compression".to_string(), "lzma".to_string())]);
        let e = open_writer(
            SinkFormat::Parquet,
            Target::File(dir.path().join("y.parquet")),
            &b.schema(),
            &bad,
            false,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("lzma"), "{e}");
    }
}
