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

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir_codec::Options;

use crate::sink::{open_writer, BatchWriter, SinkFormat, Target};
use crate::source::state::StepOutput;

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
    ) -> Result<Self, String> {
        let ext = match format {
            SinkFormat::Parquet => "parquet",
            SinkFormat::IpcFile | SinkFormat::IpcStream => "arrow",
            _ => {
                return Err(format!(
                    "sink {sink}: checkpointed output must be parquet or ipc"
                ))
            }
        };
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "sink {sink}: cannot create the directory {}: {e}",
                dir.display()
            )
        })?;
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
    pub(crate) fn clean(&self, committed: u64) -> Result<Vec<String>, String> {
        let mut deleted = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| {
            format!(
                "sink {}: cannot list {}: {e}",
                self.sink,
                self.dir.display()
            )
        })?;
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
                std::fs::remove_file(entry.path()).map_err(|e| {
                    format!(
                        "sink {}: cannot delete the uncommitted file {}: {e}",
                        self.sink,
                        entry.path().display()
                    )
                })?;
                deleted.push(name);
            }
        }
        Ok(deleted)
    }
}

impl StepOutput for StepFiles {
    /// Appends `batch` to step `step`'s file (opening it at the step's first batch).
    fn write(&mut self, step: u64, batch: &RecordBatch) -> Result<(), String> {
        if self.open.as_ref().is_none_or(|(s, _, _)| *s != step) {
            let tmp = self.dir.join(self.temp_name(step));
            let writer = open_writer(
                self.format,
                Target::File(tmp.clone()),
                &self.schema,
                &self.options,
                false,
            )
            .map_err(|e| format!("sink {}: {e}", self.sink))?;
            self.open = Some((step, tmp, writer));
        }
        if let Some((_, _, w)) = self.open.as_mut() {
            w.write(batch)
                .map_err(|e| format!("sink {}: {e}", self.sink))?;
        }
        Ok(())
    }

    /// Makes step `step`'s file durable under its final name; returns that name (none when the
    /// step wrote no rows).
    fn seal(&mut self, step: u64) -> Result<Vec<String>, String> {
        let Some((s, tmp, mut writer)) = self.open.take() else {
            return Ok(Vec::new());
        };
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            format!("sink {}: cannot {what} {}: {e}", self.sink, tmp.display())
        };
        if s != step {
            return Err(fail("seal", &format!("it belongs to step {s}, not {step}")));
        }
        writer.finish().map_err(|e| fail("complete", &e))?;
        drop(writer);
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| fail("sync", &e))?;
        let name = self.final_name(step);
        std::fs::rename(&tmp, self.dir.join(&name)).map_err(|e| fail("rename", &e))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail("sync the directory of", &e))?;
        Ok(vec![name])
    }
}
