//! `weir gen quotes`: the options-quotes workload into a file or a Kafka topic, and its schema.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_codec::Framing;
use weir_testdata::{QuoteFormat, QuoteGenerator, STOCKS_AVSC, STOCKS_PROTO};

use super::progress::{bytes, count};

/// What `weir gen quotes` was given.
pub(crate) struct QuoteArgs {
    pub(crate) count: u64,
    pub(crate) format: QuoteFormat,
    pub(crate) framing: Option<Framing>,
    pub(crate) out: Option<PathBuf>,
    pub(crate) to: Option<String>,
    pub(crate) topic_partitions: i32,
    pub(crate) compression: String,
    pub(crate) seed: u64,
    pub(crate) schema_dir: Option<PathBuf>,
    pub(crate) duplicates: f64,
    pub(crate) kafka_config: Option<PathBuf>,
    pub(crate) start: Option<String>,
    pub(crate) per_second: Option<u64>,
}

pub(crate) fn quotes(a: QuoteArgs) -> Result<()> {
    if !(0.0..=1.0).contains(&a.duplicates) {
        bail!(
            "--duplicates {}: give a share between 0 and 1",
            a.duplicates
        );
    }
    let mut generator = QuoteGenerator::new(a.seed).with_duplicates(a.duplicates);
    if a.start.is_some() || a.per_second.is_some() {
        let start = match &a.start {
            Some(s) => {
                arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s).map_err(|e| {
                    anyhow::anyhow!("--start {s}: {e}; write for example 2026-03-02T14:30:00Z")
                })?
            }
            None => weir_testdata::quotes::DEFAULT_START,
        };
        let per_second = a.per_second.unwrap_or(1_000_000);
        if per_second == 0 {
            bail!("--per-second 0: give at least 1");
        }
        // Gaps drawn uniformly from 1 to 2 x the mean.
        generator = generator.with_event_time(start, (2_000_000_000 / per_second).max(1));
    }
    let format = a.format;
    let default_framing = match format {
        QuoteFormat::Json => Framing::Lines,
        QuoteFormat::Protobuf | QuoteFormat::Avro => Framing::Varint,
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
        let avsc = dir.join("stocks.avsc");
        std::fs::write(&avsc, STOCKS_AVSC)
            .with_context(|| format!("cannot write {}", avsc.display()))?;
        eprintln!(
            "wrote {}, {} and {}",
            proto.display(),
            pb.display(),
            avsc.display()
        );
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
