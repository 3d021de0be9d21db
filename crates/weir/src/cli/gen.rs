//! `weir gen quotes`: the options-quotes workload into a file or a Kafka topic, and its schema.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_codec::{ContainerCodec, Framing};
use weir_testdata::{QuoteFormat, QuoteGenerator, QUOTE_MESSAGE, STOCKS_AVSC, STOCKS_PROTO};

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
    pub(crate) schema_registry_url: Option<String>,
    pub(crate) subject: Option<String>,
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
    if a.schema_registry_url.is_none() && a.subject.is_some() {
        bail!("--subject names where --schema-registry-url registers the schema: give both");
    }
    match (a.out, a.to) {
        (Some(_), _) if a.schema_registry_url.is_some() => {
            bail!("--schema-registry-url frames values for a Kafka topic: give --to kafka://HOST:PORT/TOPIC instead of --out")
        }
        (Some(out), _) => {
            let framing = a.framing.unwrap_or(default_framing);
            generator = generator.with_container_codec(container_codec(&a.compression, framing)?);
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
            // The registry's framing goes before each value, in place.
            let prefix = match &a.schema_registry_url {
                Some(registry) => registry_prefix(registry, a.subject.as_deref(), &url, format)?,
                None => Vec::new(),
            };
            let mut producer =
                super::kafka_producer(&url, a.topic_partitions, &a.compression, &properties)?;
            let mut msg = Vec::with_capacity(256);
            let mut total = 0u64;
            for _ in 0..a.count {
                msg.clear();
                msg.extend_from_slice(&prefix);
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

/// Registers the schema of `format` under `subject` (or `<topic>-value` of the `kafka://` URL
/// `to`) with the registry at `registry`, and returns the framing that goes before each value:
/// the magic byte 0 and the schema id, then for protobuf the indexes of the quote message.
fn registry_prefix(
    registry: &str,
    subject: Option<&str>,
    to: &str,
    format: QuoteFormat,
) -> Result<Vec<u8>> {
    let (kind, schema) = match format {
        QuoteFormat::Avro => (weir::SchemaType::Avro, STOCKS_AVSC),
        QuoteFormat::Protobuf => (weir::SchemaType::Protobuf, STOCKS_PROTO),
        QuoteFormat::Json => {
            bail!("--schema-registry-url takes --format avro or protobuf (JSON values carry no schema id)")
        }
    };
    let subject = match subject {
        Some(s) => s.to_string(),
        None => {
            let topic = to.rsplit_once('/').map(|(_, t)| t).unwrap_or_default();
            format!("{topic}-value")
        }
    };
    let options = weir_codec::Options::new([("schema.registry.url".into(), registry.into())]);
    let id = weir::register_schema(&options, &subject, kind, schema)
        .with_context(|| "cannot register the quotes' schema")?;
    let indexes = match format {
        QuoteFormat::Protobuf => {
            let parsed = weir_codec::ProtoSchema::from_sources(
                &[("stocks.proto", STOCKS_PROTO)],
                "stocks.proto",
            )?;
            weir_codec::registry::indexes_for_message(&parsed, "stocks.proto", QUOTE_MESSAGE)
                .with_context(|| format!("stocks.proto has no message {QUOTE_MESSAGE}"))?
        }
        _ => Vec::new(),
    };
    eprintln!("registered the quotes' schema under subject '{subject}': schema id {id}");
    Ok(match format {
        QuoteFormat::Protobuf => weir_codec::registry::registry_prefix(id, &indexes),
        _ => {
            let mut prefix = vec![0];
            prefix.extend_from_slice(&id.to_be_bytes());
            prefix
        }
    })
}

/// Writes `n` framed quotes to `out`; returns the bytes written.
/// The blocks' codec of a container file, from `--compression` (Kafka's names, and Avro's);
/// other framings of a file take none.
fn container_codec(compression: &str, framing: Framing) -> Result<ContainerCodec> {
    let codec = match compression {
        "none" | "null" => ContainerCodec::Null,
        "deflate" => ContainerCodec::Deflate,
        "snappy" => ContainerCodec::Snappy,
        "zstd" | "zstandard" => ContainerCodec::Zstandard,
        other => bail!(
            "--compression {other}: an Avro container file's blocks are compressed with none, \
             deflate, snappy or zstd"
        ),
    };
    if codec != ContainerCodec::Null && framing != Framing::AvroContainer {
        bail!(
            "--compression {compression}: a file is compressed only with --framing \
             avro-container (its blocks); other files are written as they are"
        );
    }
    Ok(codec)
}

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
