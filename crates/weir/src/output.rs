//! Where the rows of `SELECT` statements go: a [`ResultOutput`], such as a [`ResultWriter`] that
//! prints a table per statement or writes every statement's rows into one file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_codec::Options;

use crate::sink::{open_writer, BatchWriter, SinkError, SinkFormat, Target};

/// Receives the rows of `SELECT` statements run by [`crate::Engine::run_script`].
pub trait ResultOutput: Send {
    /// A statement's rows begin.
    fn begin(&mut self, schema: &SchemaRef) -> Result<(), SinkError>;
    /// One batch of rows.
    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError>;
    /// The statement's rows end (also after a failure, for the rows that came before it).
    fn end(&mut self) -> Result<(), SinkError>;
}

/// Keeps every batch (for [`crate::Engine::query`]).
#[derive(Default)]
pub(crate) struct CollectRows(Vec<RecordBatch>);

impl CollectRows {
    pub(crate) fn into_batches(self) -> Vec<RecordBatch> {
        self.0
    }
}

impl ResultOutput for CollectRows {
    fn begin(&mut self, _schema: &SchemaRef) -> Result<(), SinkError> {
        Ok(())
    }

    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.0.push(batch.clone());
        Ok(())
    }

    fn end(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// How a [`ResultWriter`] prints on standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdoutFormat {
    /// A text table per statement.
    Table,
    /// One JSON object per row.
    JsonLines,
    /// An Arrow IPC stream per statement.
    IpcStream,
}

enum Destination {
    Stdout(SinkFormat),
    File(PathBuf, SinkFormat),
}

/// Writes `SELECT` rows: each statement on standard output, or every statement into one file.
pub struct ResultWriter {
    destination: Destination,
    writer: Option<(SchemaRef, Box<dyn BatchWriter>)>,
    streaming: bool,
}

impl ResultWriter {
    /// Prints each statement's rows on standard output; `streaming` shows rows as they come
    /// (follow mode) instead of when the statement ends.
    pub fn stdout(format: StdoutFormat, streaming: bool) -> Self {
        let format = match format {
            StdoutFormat::Table => SinkFormat::Table,
            StdoutFormat::JsonLines => SinkFormat::JsonLines,
            StdoutFormat::IpcStream => SinkFormat::IpcStream,
        };
        Self {
            destination: Destination::Stdout(format),
            writer: None,
            streaming,
        }
    }

    /// Writes every statement's rows into `path`, in the format its extension names
    /// (`.parquet`, `.arrow`, `.arrows`, `.jsonl`, `.txt`).
    pub fn file(path: &Path) -> Result<Self, SinkError> {
        let format = SinkFormat::from_path(path)?;
        if path.is_dir() {
            return Err(SinkError::Options(format!(
                "{} is a directory; give a file",
                path.display()
            )));
        }
        Ok(Self {
            destination: Destination::File(path.to_path_buf(), format),
            writer: None,
            streaming: false,
        })
    }

    /// Completes the output (file footers) and flushes standard output.
    pub fn finish(&mut self) -> Result<(), SinkError> {
        if let Some((_, mut w)) = self.writer.take() {
            w.finish()?;
        }
        // A closed standard output (a pipe to `head`) is not an error of the query.
        let _ = std::io::stdout().flush();
        Ok(())
    }
}

impl ResultOutput for ResultWriter {
    fn begin(&mut self, schema: &SchemaRef) -> Result<(), SinkError> {
        match &self.destination {
            Destination::Stdout(format) => {
                // Each statement prints on its own.
                if let Some((_, mut w)) = self.writer.take() {
                    w.finish()?;
                }
                let w = open_writer(
                    *format,
                    Target::Stdout,
                    schema,
                    &Options::default(),
                    self.streaming,
                )?;
                self.writer = Some((Arc::clone(schema), w));
            }
            Destination::File(path, format) => match &self.writer {
                Some((s, _)) if s.fields() != schema.fields() => {
                    return Err(SinkError::Options(format!(
                        "{} already holds rows of another shape; write one SELECT per file",
                        path.display()
                    )))
                }
                Some(_) => {}
                None => {
                    let w = open_writer(
                        *format,
                        Target::File(path.clone()),
                        schema,
                        &Options::default(),
                        false,
                    )?;
                    self.writer = Some((Arc::clone(schema), w));
                }
            },
        }
        Ok(())
    }

    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some((_, w)) => w.write(batch),
            None => Err(SinkError::Options(
                "rows came before their statement began; this is a bug in weir".into(),
            )),
        }
    }

    fn end(&mut self) -> Result<(), SinkError> {
        match (&self.destination, self.writer.as_mut()) {
            (Destination::Stdout(_), Some(_)) => {
                if let Some((_, mut w)) = self.writer.take() {
                    w.finish()?;
                }
            }
            // The file stays open for the next statement; the rows of this one are written.
            (Destination::File(..), Some((_, w))) => w.sync()?,
            (_, None) => {}
        }
        Ok(())
    }
}
