//! `weir decode`: prints the protobuf or Avro messages of a file in file order, like
//! `protoc --decode` meets
//! `kcat`. It runs a one-source script on the engine, so the output is exactly what a query sees.

use std::path::PathBuf;

use anyhow::Result;
use weir::{Engine, EngineOptions, ResultWriter, StdoutFormat};
use weir_codec::Framing;

use super::progress::count;

/// What `weir decode` was given.
pub(crate) struct DecodeArgs {
    /// Avro datums of the schema at `location` instead of protobuf.
    pub(crate) avro: bool,
    pub(crate) location: PathBuf,
    pub(crate) message: Option<String>,
    pub(crate) input: String,
    pub(crate) framing: Framing,
    pub(crate) includes: Vec<PathBuf>,
    pub(crate) output: StdoutFormat,
    pub(crate) limit: Option<usize>,
    pub(crate) skip_errors: bool,
}

/// What a bad-message error tells a `weir decode` user to do.
const HINT: &str = "pass --skip-errors to go past bad messages";

pub(crate) fn decode(a: DecodeArgs) -> Result<()> {
    let quote = |s: &str| s.replace('\'', "''");
    let include = a
        .includes
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    if !a.avro && a.message.is_none() {
        anyhow::bail!(
            "--message is required with --encoding protobuf (for example stocks.QuoteNBBO)"
        );
    }
    let location = quote(&a.location.display().to_string());
    let encoding = if a.avro {
        format!("'encoding' = 'avro', 'avro.schema.file' = '{location}'")
    } else {
        format!(
            "'encoding' = 'protobuf', 'message' = '{}', 'location' = '{location}'{}",
            quote(a.message.as_deref().unwrap_or_default()),
            if include.is_empty() {
                String::new()
            } else {
                format!(", 'proto.include' = '{}'", quote(&include))
            }
        )
    };
    let mut script = format!(
        "CREATE SOURCE input WITH ('connector' = 'file', 'path' = '{}', 'framing' = '{}', \
         {encoding}, 'on.error' = '{}');\nSELECT * FROM input",
        quote(&a.input),
        a.framing,
        if a.skip_errors { "skip" } else { "fail" },
    );
    if let Some(n) = a.limit {
        script.push_str(&format!(" LIMIT {n}"));
    }
    // One reader keeps the file's order.
    let engine = Engine::new(EngineOptions {
        partitions: 1,
        bad_message_hint: HINT,
        ..EngineOptions::default()
    });
    let mut out = ResultWriter::stdout(a.output, false);
    super::runtime(Some(1))?.block_on(async {
        let result = engine.run_script(&script, &mut out).await;
        // The rows decoded before a bad message are printed before its error.
        let output = out.finish();
        result.map_err(|e| match e {
            // The script is ours, not the user's: report what failed without its line.
            weir::EngineError::Statement { source, .. } => anyhow::Error::new(source),
            other => other.into(),
        })?;
        output?;
        let r = engine.source_reports();
        if let Some(s) = r.first().filter(|s| s.skipped > 0) {
            eprintln!("skipped {} messages that did not decode", count(s.skipped));
        }
        anyhow::Ok(())
    })
}
