//! Exactly-once output: a sink fed straight from a source with state writes one file per step.
//!
//! A step's rows go to `.<sink>-<step>.<ext>.tmp` in the sink's directory. At the step's end the
//! file is completed, synced and renamed to `<sink>-<step>.<ext>` (and the directory synced);
//! only then does one atomic RocksDB commit record the step's dedup keys, the next position of
//! every source partition and the file's name. On start, temporary files and any file of a step
//! after the last committed one (renamed, but its commit never happened) are deleted, and the
//! source resumes at the committed positions. So a crash at any moment neither loses nor repeats
//! a row, and the dedup state always matches the files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_codec::Options;
use weir_dedup::{Checkpoint, StateStore};

use super::reader::Next;
use super::scan::open_whole;
use super::state::dedup;
use super::threads::{with_read_ahead, ReadItem};
use crate::error::{SourceError, SourceErrorKind};
use crate::sink::{open_writer, BatchWriter, SinkError, SinkFormat, Target};
use crate::source::SourceDefinition;

/// The files of a checkpointed sink.
pub(crate) struct StepFiles {
    dir: PathBuf,
    sink: String,
    ext: &'static str,
    format: SinkFormat,
    options: Options,
    schema: SchemaRef,
    open: Option<(u64, PathBuf, Box<dyn BatchWriter>)>,
}

impl StepFiles {
    /// The sink `sink` writing `format` files of `schema` into the directory `dir`.
    pub(crate) fn new(
        dir: &Path,
        sink: &str,
        format: SinkFormat,
        options: Options,
        schema: SchemaRef,
    ) -> Result<Self, SinkError> {
        let ext = match format {
            SinkFormat::Parquet => "parquet",
            SinkFormat::IpcFile | SinkFormat::IpcStream => "arrow",
            _ => {
                return Err(SinkError::Options(
                    "an exactly-once sink writes parquet or ipc files".into(),
                ))
            }
        };
        std::fs::create_dir_all(dir).map_err(|e| SinkError::io(dir, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            sink: sink.to_string(),
            ext,
            format,
            options,
            schema,
            open: None,
        })
    }

    fn final_name(&self, step: u64) -> String {
        format!("{}-{step:010}.{}", self.sink, self.ext)
    }

    fn temp_name(&self, step: u64) -> String {
        format!(".{}-{step:010}.{}.tmp", self.sink, self.ext)
    }

    /// Deletes what a crashed run left: temporary files, and files of steps after `committed`.
    /// Returns the names deleted.
    pub(crate) fn clean(&self, committed: u64) -> Result<Vec<String>, SinkError> {
        let mut deleted = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| SinkError::io(&self.dir, e))?;
        let prefix = format!("{}-", self.sink);
        let temp_prefix = format!(".{}-", self.sink);
        let suffix = format!(".{}", self.ext);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = if name.starts_with(&temp_prefix) && name.ends_with(".tmp") {
                true
            } else if let Some(step) = name
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix(&suffix))
                .and_then(|s| s.parse::<u64>().ok())
            {
                step > committed
            } else {
                false
            };
            if stale {
                std::fs::remove_file(entry.path()).map_err(|e| SinkError::io(&entry.path(), e))?;
                deleted.push(name);
            }
        }
        Ok(deleted)
    }

    /// Appends `batch` to step `step`'s file (opening it at the step's first batch).
    fn write(&mut self, step: u64, batch: &RecordBatch) -> Result<(), SinkError> {
        if self.open.as_ref().is_none_or(|(s, _, _)| *s != step) {
            let tmp = self.dir.join(self.temp_name(step));
            let writer = open_writer(
                self.format,
                Target::File(tmp.clone()),
                &self.schema,
                &self.options,
                false,
            )?;
            self.open = Some((step, tmp, writer));
        }
        match self.open.as_mut() {
            Some((_, _, w)) => w.write(batch),
            None => Ok(()),
        }
    }

    /// Makes step `step`'s file durable under its final name; returns that name (none when the
    /// step wrote no rows).
    fn seal(&mut self, step: u64) -> Result<Vec<String>, SinkError> {
        let Some((s, tmp, mut writer)) = self.open.take() else {
            return Ok(Vec::new());
        };
        if s != step {
            return Err(SinkError::Options(format!(
                "the open file {} belongs to step {s}, not {step}; this is a bug in weir",
                tmp.display()
            )));
        }
        writer.finish()?;
        drop(writer);
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| SinkError::io(&tmp, e))?;
        let name = self.final_name(step);
        let target = self.dir.join(&name);
        std::fs::rename(&tmp, &target).map_err(|e| SinkError::io(&target, e))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| SinkError::io(&self.dir, e))?;
        Ok(vec![name])
    }
}

/// Runs the exactly-once loop of `source` into `files`: read (on a thread of its own), dedup,
/// write each batch, and at each step's end seal the file before the state commit that records
/// it. Returns the rows written.
pub(crate) fn run(
    source: &Arc<SourceDefinition>,
    store: &mut StateStore,
    files: &mut StepFiles,
) -> Result<u64, SourceError> {
    let reader = open_whole(source, store.checkpoint())?;
    with_read_ahead(&source.name, reader, |next| {
        step_loop(source, store, files, next)
    })?
}

/// [`run`]'s loop, fed by the reading thread.
fn step_loop(
    source: &Arc<SourceDefinition>,
    store: &mut StateStore,
    files: &mut StepFiles,
    read: &mut dyn FnMut() -> ReadItem,
) -> Result<u64, SourceError> {
    let Some(spec) = &source.state else {
        return Ok(0);
    };
    let sink_name = files.sink.clone();
    let sink = |e: SinkError| {
        SourceError::new(
            &source.name,
            SourceErrorKind::Sink {
                sink: sink_name.clone(),
                source: Box::new(e),
            },
        )
    };
    let state = |e| SourceError::new(&source.name, e);
    let mut rows_out = 0u64;
    let mut step_rows = 0u64;
    let mut started = Instant::now();
    let mut moved = false;
    loop {
        let (next, positions) = read()?;
        let end = matches!(next, Next::End);
        if let Next::Batch(b) = next {
            step_rows += b.num_rows() as u64;
            moved = true;
            let b = dedup(store, b, &source.name)?;
            if b.num_rows() > 0 {
                files.write(store.checkpoint().step + 1, &b).map_err(sink)?;
                rows_out += b.num_rows() as u64;
            }
        }
        if moved && (end || spec.commit.due(started, step_rows)) {
            let names = files.seal(store.checkpoint().step + 1).map_err(sink)?;
            store
                .commit(Checkpoint {
                    positions,
                    files: names,
                    ..Checkpoint::default()
                })
                .map_err(state)?;
            step_rows = 0;
            moved = false;
            started = Instant::now();
        }
        if end {
            store.finish().map_err(state)?;
            spec.remember(store);
            return Ok(rows_out);
        }
    }
}
