//! `weir gen quotes`: the options-quotes workload into a file or a Kafka topic, and its schema.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_testdata::{Framing, QuoteFormat, QuoteGenerator, STOCKS_PROTO};

use super::progress::{bytes, count};

/// What `weir gen quotes` was given.
pub(crate) struct QuoteArgs {
    pub(crate) count: u64,
    pub(crate) protobuf: bool,
    pub(crate) framing: Option<Framing>,
    pub(crate) out: Option<PathBuf>,
    pub(crate) to: Option<String>,
    pub(crate) topic_partitions: i32,
    pub(crate) compression: String,
    pub(crate) seed: u64,
    pub(crate) schema_dir: Option<PathBuf>,
    pub(crate) duplicates: f64,
    pub(crate) kafka_config: Option<PathBuf>,
}

pub(crate) fn quotes(a: QuoteArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&a.duplicates) {
        bail!(
            "--duplicates {}: give a share between 0 and 1",
            a.duplicates
        );
    }
    let mut generator = QuoteGenerator::new(a.seed).with_duplicates(a.duplicates);
    let (format, default_framing) = if a.protobuf {
        (QuoteFormat::Protobuf, Framing::Varint)
    } else {
        (QuoteFormat::Json, Framing::Lines)
    };
    match (a.out, a.to) {
        (Some(out), _) => {
            let framing = a.framing.unwrap_or(default_framing);
            let written = write_file(&out, a.count, &mut generator, format, framing)?;
            eprintln!(
                "wrote {} quotes ({}) to {}",
                count(a.count),
                bytes(written),
                out.display()
            );
        }
        (None, Some(url)) => {
            let properties = super::kafka_properties(a.kafka_config.as_deref())?;
            let mut producer =
                super::kafka_producer(&url, a.topic_partitions, &a.compression, &properties)?;
            let mut msg = Vec::with_capacity(256);
            let mut total = 0u64;
            for _ in 0..a.count {
                msg.clear();
                let q = generator.next_or_repeat();
                q.encode(format, &mut msg);
                total += msg.len() as u64;
                producer.send(None, Some(q.ticker.as_bytes()), &msg)?;
            }
            producer.flush()?;
            eprintln!(
                "sent {} quotes ({}) to {url}, keyed by ticker",
                count(a.count),
                bytes(total)
            );
        }
        (None, None) => bail!("give --out FILE or --to kafka://HOST:PORT/TOPIC"),
    }
    if let Some(dir) = a.schema_dir {
        let (proto, pb) = write_schema(&dir)?;
        eprintln!("wrote {} and {}", proto.display(), pb.display());
    }
    Ok(())
}

/// Writes `n` framed quotes to `out`; returns the bytes written.
pub(crate) fn write_file(
    out: &Path,
    n: u64,
    generator: &mut QuoteGenerator,
    format: QuoteFormat,
    framing: Framing,
) -> Result<u64> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file =
        std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    generator
        .write(&mut w, n, format, framing)
        .with_context(|| format!("cannot write {}", out.display()))
}

/// Writes `stocks.proto` and its descriptor set `stocks.pb` into `dir`.
pub(crate) fn write_schema(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let proto = dir.join("stocks.proto");
    std::fs::write(&proto, STOCKS_PROTO)
        .with_context(|| format!("cannot write {}", proto.display()))?;
    let pb = dir.join("stocks.pb");
    let set = weir_codec::ProtoSchema::load(&proto, &[])?.descriptor_set_bytes();
    std::fs::write(&pb, set).with_context(|| format!("cannot write {}", pb.display()))?;
    Ok((proto, pb))
}
