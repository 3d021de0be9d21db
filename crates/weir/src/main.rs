//! The `weir` program: run SQL pipelines, generate quotes, decode files, and the demo.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use clap::{Parser, Subcommand, ValueEnum};
use weir::engine::{Engine, EngineOptions, ResultOutput};
use weir::gen::{write_quotes_from, QuoteFormat, DEFAULT_SEED, QUOTE_MESSAGE, STOCKS_PROTO};
use weir::progress::{bytes, count, ProgressLine, Totals};
use weir::sink::{open_writer, BatchWriter, SinkError, SinkFormat, Target};
use weir::source::framing::Framing;
use weir_codec::Options;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Streaming ingestion: Kafka or files, protobuf or JSON, straight into Arrow, queried with SQL.",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the statements of a SQL file in order (CREATE SOURCE, CREATE SINK, INSERT, SELECT, ...).
    Run {
        /// The SQL file.
        pipeline: PathBuf,
        /// Keep reading at the end of the sources; sink pipelines run until Ctrl-C.
        #[arg(long)]
        follow: bool,
        /// Write SELECT results to this file instead of printing a table (.parquet, .arrow,
        /// .arrows, .jsonl or .txt).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Decoders per source scan and DataFusion partitions [default: one per core].
        #[arg(long)]
        partitions: Option<usize>,
        /// Rows per batch.
        #[arg(long, default_value_t = weir_codec::DEFAULT_BATCH_SIZE)]
        batch_size: usize,
        /// No progress line and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Generate synthetic data.
    Gen {
        #[command(subcommand)]
        what: GenWhat,
    },
    /// Decode a file of messages and print them (like `protoc --decode` meets `kcat`).
    Decode {
        /// The schema: a .proto file or a descriptor set (.pb, .desc).
        #[arg(long)]
        location: PathBuf,
        /// The full message name, for example stocks.QuoteNBBO.
        #[arg(long)]
        message: String,
        /// The file (or directory, or glob) of messages.
        #[arg(long)]
        input: String,
        /// How messages are delimited in the file.
        #[arg(long, value_enum, default_value_t = FramingArg::Varint)]
        framing: FramingArg,
        /// Import paths for a .proto schema (repeatable).
        #[arg(long = "proto-include")]
        proto_include: Vec<PathBuf>,
        /// How to print.
        #[arg(long, value_enum, default_value_t = DecodeOutput::Jsonl)]
        output: DecodeOutput,
        /// Print at most this many messages.
        #[arg(long)]
        limit: Option<usize>,
        /// Skip messages that do not decode (counted on standard error) instead of stopping.
        #[arg(long)]
        skip_errors: bool,
    },
    /// Send the messages of a file to a Kafka topic (batched; the topic is created if missing).
    Produce {
        /// The file (or directory, or glob) of messages.
        #[arg(long)]
        input: String,
        /// How messages are delimited in the file.
        #[arg(long, value_enum, default_value_t = FramingArg::Varint)]
        framing: FramingArg,
        /// kafka://HOST:PORT/TOPIC
        #[arg(long)]
        to: String,
        /// Partitions of a topic that this creates.
        #[arg(long, default_value_t = 4)]
        topic_partitions: i32,
        /// Batch compression: none, gzip, snappy, lz4, zstd.
        #[arg(long, default_value = "none")]
        compression: String,
    },
    /// Print what a source's state directory ('state.dir') holds: the last checkpoint (step,
    /// read positions, files) and the dedup statistics as of the last commit.
    Stats {
        /// The state directory.
        state_dir: PathBuf,
    },
    /// Generate quotes, run seed 002's source and a GROUP BY ticker query, print the top groups
    /// and the throughput. Needs no broker.
    Demo {
        /// Quotes to generate.
        #[arg(long, default_value_t = 5_000_000)]
        count: u64,
        /// Decoders per source scan [default: one per core].
        #[arg(long)]
        partitions: Option<usize>,
        /// Keep the generated files in this directory instead of a temporary one.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// No progress line.
        #[arg(long, short)]
        quiet: bool,
    },
}

#[derive(Subcommand)]
enum GenWhat {
    /// Options quotes in the shape of seed 002 (stocks.QuoteNBBO, 10,000 tickers).
    Quotes {
        /// How many quotes.
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// Message encoding.
        #[arg(long, value_enum, default_value_t = FormatArg::Protobuf)]
        format: FormatArg,
        /// Framing in the file [default: varint for protobuf, lines for json].
        #[arg(long, value_enum)]
        framing: Option<FramingArg>,
        /// The output file.
        #[arg(long, required_unless_present = "to", conflicts_with = "to")]
        out: Option<PathBuf>,
        /// Send to Kafka instead: kafka://HOST:PORT/TOPIC (the topic is created if missing).
        #[arg(long)]
        to: Option<String>,
        /// Partitions of a topic that --to creates.
        #[arg(long, default_value_t = 4)]
        topic_partitions: i32,
        /// Batch compression when sending to Kafka: none, gzip, snappy, lz4, zstd.
        #[arg(long, default_value = "none")]
        compression: String,
        /// Seed: the same seed gives the same bytes.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
        /// Also write stocks.proto and its descriptor set stocks.pb into this directory.
        #[arg(long)]
        schema_dir: Option<PathBuf>,
        /// Share of quotes (0 to 1) that repeat one of the last few thousand exactly, the same
        /// (ticker, sequence_number), as producer retries would; for dedup.
        #[arg(long, default_value_t = 0.0)]
        duplicates: f64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Protobuf,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum FramingArg {
    Varint,
    U32be,
    Lines,
}

impl From<FramingArg> for Framing {
    fn from(f: FramingArg) -> Self {
        match f {
            FramingArg::Varint => Framing::Varint,
            FramingArg::U32be => Framing::U32Be,
            FramingArg::Lines => Framing::Lines,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum DecodeOutput {
    /// One JSON object per message.
    Jsonl,
    /// An Arrow IPC stream on standard output.
    Ipc,
    /// A text table.
    Table,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn runtime(partitions: Option<usize>) -> Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.enable_all();
    if let Some(n) = partitions {
        b.worker_threads(n.max(1));
    }
    b.build().context("cannot start the runtime")
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run {
            pipeline,
            follow,
            output,
            partitions,
            batch_size,
            quiet,
        } => {
            let script = std::fs::read_to_string(&pipeline)
                .with_context(|| format!("cannot read {}", pipeline.display()))?;
            let engine = Engine::new(EngineOptions {
                follow,
                partitions: partitions.unwrap_or(0),
                batch_size,
            });
            let mut out = match output {
                Some(path) => ResultWriter::file(path)?,
                None => ResultWriter::stdout_table(follow),
            };
            runtime(partitions)?
                .block_on(run_pipeline(&engine, &script, &mut out, quiet))
                .with_context(|| format!("in {}", pipeline.display()))
        }
        Command::Gen {
            what:
                GenWhat::Quotes {
                    count: n,
                    format,
                    framing,
                    out,
                    to,
                    topic_partitions,
                    compression,
                    seed,
                    schema_dir,
                    duplicates,
                },
        } => {
            if !(0.0..=1.0).contains(&duplicates) {
                bail!("--duplicates {duplicates}: give a share between 0 and 1");
            }
            let generator = weir::gen::QuoteGenerator::new(seed).with_duplicates(duplicates);
            let (format, default_framing) = match format {
                FormatArg::Protobuf => (QuoteFormat::Protobuf, Framing::Varint),
                FormatArg::Json => (QuoteFormat::Json, Framing::Lines),
            };
            match (out, to) {
                (Some(out), _) => {
                    let framing = framing.map(Framing::from).unwrap_or(default_framing);
                    let written = gen_quotes(&out, n, generator, format, framing)?;
                    eprintln!(
                        "wrote {} quotes ({}) to {}",
                        count(n),
                        bytes(written),
                        out.display()
                    );
                }
                (None, Some(url)) => {
                    let mut producer = kafka_producer(&url, topic_partitions, &compression)?;
                    let mut generator = generator;
                    let mut msg = Vec::with_capacity(256);
                    let mut total = 0u64;
                    for _ in 0..n {
                        msg.clear();
                        let q = generator.next_or_repeat();
                        match format {
                            QuoteFormat::Protobuf => q.encode_protobuf(&mut msg),
                            QuoteFormat::Json => q.encode_json(&mut msg),
                        }
                        total += msg.len() as u64;
                        producer.send(None, Some(q.ticker.as_bytes()), &msg)?;
                    }
                    producer.flush()?;
                    eprintln!(
                        "sent {} quotes ({}) to {url}, keyed by ticker",
                        count(n),
                        bytes(total)
                    );
                }
                (None, None) => bail!("give --out FILE or --to kafka://HOST:PORT/TOPIC"),
            }
            if let Some(dir) = schema_dir {
                let (proto, pb) = write_schema(&dir)?;
                eprintln!("wrote {} and {}", proto.display(), pb.display());
            }
            Ok(())
        }
        Command::Decode {
            location,
            message,
            input,
            framing,
            proto_include,
            output,
            limit,
            skip_errors,
        } => decode(
            location,
            message,
            input,
            framing.into(),
            proto_include,
            output,
            limit,
            skip_errors,
        ),
        Command::Produce {
            input,
            framing,
            to,
            topic_partitions,
            compression,
        } => produce(&input, framing.into(), &to, topic_partitions, &compression),
        Command::Stats { state_dir } => stats(&state_dir),
        Command::Demo {
            count: n,
            partitions,
            dir,
            quiet,
        } => runtime(partitions)?.block_on(demo(n, partitions, dir, quiet)),
    }
}

async fn run_pipeline(
    engine: &Engine,
    script: &str,
    out: &mut ResultWriter,
    quiet: bool,
) -> Result<()> {
    let started = Instant::now();
    let progress = start_progress(engine, quiet);
    let result = async {
        engine.run_script(script, out).await?;
        if engine.pipelines_running() {
            tokio::select! {
                r = engine.wait() => r?,
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("stopping: finishing the sinks");
                    engine.stop();
                    engine.wait().await?;
                }
            }
        }
        anyhow::Ok(())
    }
    .await;
    progress.stop();
    // Sinks are completed even after an error, so what was written stays readable.
    let sinks = engine.finish().await;
    out.finish()?;
    if !quiet {
        report(engine, started);
        if let Ok(sinks) = &sinks {
            for s in sinks {
                let at = s
                    .path
                    .as_ref()
                    .map(|p| format!(" to {}", p.display()))
                    .unwrap_or_default();
                eprintln!("sink {}: {} rows{at}", s.name, count(s.rows));
            }
        }
    }
    result?;
    sinks?;
    Ok(())
}

fn start_progress(engine: &Engine, quiet: bool) -> ProgressLine {
    let stats = engine.source_stats_handle();
    ProgressLine::start(quiet, move || {
        let mut t = Totals::default();
        for s in stats.snapshot() {
            t.messages += s.messages;
            t.bytes += s.bytes;
            t.errors += s.skipped + s.dead_lettered;
        }
        t
    })
}

fn report(engine: &Engine, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    for s in engine.source_reports() {
        if s.messages == 0 {
            continue;
        }
        eprintln!(
            "source {}: {} messages ({}), {} decoded, {} skipped, {} dead-lettered in {:.2} s ({}/s)",
            s.name,
            count(s.messages),
            bytes(s.bytes),
            count(s.decoded),
            count(s.skipped),
            count(s.dead_lettered),
            secs,
            count((s.messages as f64 / secs.max(1e-9)) as u64)
        );
    }
    for (name, st) in engine.state_reports() {
        eprintln!("source {name}, state:");
        for line in st.to_string().lines() {
            eprintln!("  {line}");
        }
    }
}

fn stats(dir: &Path) -> Result<()> {
    let (checkpoint, setup, stats) = weir_dedup::StateStore::inspect(dir)
        .with_context(|| format!("cannot read the state in {}", dir.display()))?;
    println!("state directory:        {}", dir.display());
    println!(
        "dedup settings:         {}",
        if setup.is_empty() {
            "none (checkpoints only)"
        } else {
            &setup
        }
    );
    print!("{stats}");
    println!("read positions (next to read):");
    for (name, next) in &checkpoint.positions {
        println!("  {name} {next}");
    }
    if !checkpoint.files.is_empty() {
        println!("files of the last step:  {}", checkpoint.files.join(", "));
    }
    Ok(())
}

fn gen_quotes(
    out: &Path,
    n: u64,
    generator: weir::gen::QuoteGenerator,
    format: QuoteFormat,
    framing: Framing,
) -> Result<u64> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file =
        std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    write_quotes_from(&mut w, generator, n, format, framing)
        .with_context(|| format!("cannot write {}", out.display()))
}

/// Writes `stocks.proto` and its descriptor set `stocks.pb` into `dir`.
fn write_schema(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let proto = dir.join("stocks.proto");
    std::fs::write(&proto, STOCKS_PROTO)
        .with_context(|| format!("cannot write {}", proto.display()))?;
    let pb = dir.join("stocks.pb");
    let set = weir_codec::ProtoSchema::load(&proto, &[])?.descriptor_set_bytes();
    std::fs::write(&pb, set).with_context(|| format!("cannot write {}", pb.display()))?;
    Ok((proto, pb))
}

#[allow(clippy::too_many_arguments)]
fn decode(
    location: PathBuf,
    message: String,
    input: String,
    framing: Framing,
    includes: Vec<PathBuf>,
    output: DecodeOutput,
    limit: Option<usize>,
    skip_errors: bool,
) -> Result<()> {
    let quote = |s: &str| s.replace('\'', "''");
    let include = includes
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    let mut script = format!(
        "CREATE SOURCE input WITH ('connector' = 'file', 'path' = '{}', 'framing' = '{framing}', 'encoding' = 'protobuf', 'message' = '{}', 'location' = '{}', 'on.error' = '{}'{});\nSELECT * FROM input",
        quote(&input),
        quote(&message),
        quote(&location.display().to_string()),
        if skip_errors { "skip" } else { "fail" },
        if include.is_empty() { String::new() } else { format!(", 'proto.include' = '{}'", quote(&include)) },
    );
    if let Some(n) = limit {
        script.push_str(&format!(" LIMIT {n}"));
    }
    // One partition keeps the file's order.
    let engine = Engine::new(EngineOptions {
        partitions: 1,
        ..EngineOptions::default()
    });
    let mut out = ResultWriter {
        mode: match output {
            DecodeOutput::Jsonl => OutputMode::Stdout(SinkFormat::JsonLines),
            DecodeOutput::Ipc => OutputMode::Stdout(SinkFormat::IpcStream),
            DecodeOutput::Table => OutputMode::Stdout(SinkFormat::Table),
        },
        writer: None,
        streaming: false,
    };
    runtime(Some(1))?.block_on(async {
        // The script is ours, not the user's: report what failed without its line.
        engine
            .run_script(&script, &mut out)
            .await
            .map_err(|e| match e {
                weir::EngineError::Statement { message, .. } => anyhow::anyhow!(message),
                other => other.into(),
            })?;
        out.finish()?;
        let r = engine.source_reports();
        if let Some(s) = r.first().filter(|s| s.skipped > 0) {
            eprintln!("skipped {} messages that did not decode", count(s.skipped));
        }
        anyhow::Ok(())
    })
}

/// Parses kafka://HOST:PORT[,HOST:PORT...]/TOPIC.
fn kafka_url(url: &str) -> Result<(Vec<String>, String)> {
    let rest = url
        .strip_prefix("kafka://")
        .with_context(|| format!("'{url}' is not a kafka://HOST:PORT/TOPIC address"))?;
    let (brokers, topic) = rest
        .split_once('/')
        .filter(|(b, t)| !b.is_empty() && !t.is_empty())
        .with_context(|| format!("'{url}' needs brokers and a topic: kafka://HOST:PORT/TOPIC"))?;
    Ok((
        brokers.split(',').map(str::to_string).collect(),
        topic.to_string(),
    ))
}

fn kafka_producer(url: &str, partitions: i32, compression: &str) -> Result<weir_kafka::Producer> {
    let (brokers, topic) = kafka_url(url)?;
    let compression: weir_kafka::Compression = compression.parse().map_err(anyhow::Error::msg)?;
    weir_kafka::create_topic(&brokers, &topic, partitions, 1, &[], true)
        .with_context(|| format!("cannot create topic {topic}"))?;
    weir_kafka::Producer::connect(&weir_kafka::ProducerConfig {
        brokers,
        topic,
        compression,
        ..weir_kafka::ProducerConfig::default()
    })
    .with_context(|| format!("cannot connect to {url}"))
}

fn produce(
    input: &str,
    framing: Framing,
    to: &str,
    partitions: i32,
    compression: &str,
) -> Result<()> {
    let mut producer = kafka_producer(to, partitions, compression)?;
    let feed = weir::source::file::FileFeed::new(input, framing, false, 64 << 20)?;
    let mut buf = Vec::new();
    let (mut n, mut total) = (0u64, 0u64);
    loop {
        match feed.next_block(&mut buf)? {
            weir::source::file::BlockStatus::Block { len, .. } => {
                let mut at = 0;
                while at < len {
                    match framing.frame(&buf[..len], at, true) {
                        weir::source::framing::Frame::Message { start, end, next } => {
                            producer.send(None, None, &buf[start..end])?;
                            n += 1;
                            total += (end - start) as u64;
                            at = next;
                        }
                        weir::source::framing::Frame::Empty { next } => at = next,
                        other => bail!("{input}: unexpected frame {other:?}"),
                    }
                }
            }
            weir::source::file::BlockStatus::Bad {
                file,
                offset,
                reason,
                ..
            } => {
                bail!("{file} at byte {offset}: {reason}")
            }
            weir::source::file::BlockStatus::Wait | weir::source::file::BlockStatus::End => break,
        }
    }
    producer.flush()?;
    eprintln!("sent {} messages ({}) to {to}", count(n), bytes(total));
    Ok(())
}

async fn demo(n: u64, partitions: Option<usize>, dir: Option<PathBuf>, quiet: bool) -> Result<()> {
    let temp;
    let dir = match dir {
        Some(d) => d,
        None => {
            temp = tempfile::tempdir().context("cannot create a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let data = dir.join("quotes.bin");
    eprintln!("generating {} quotes into {} ...", count(n), data.display());
    let t = Instant::now();
    let written = gen_quotes(
        &data,
        n,
        weir::gen::QuoteGenerator::new(DEFAULT_SEED),
        QuoteFormat::Protobuf,
        Framing::Varint,
    )?;
    write_schema(&dir.join("descriptors"))?;
    eprintln!("  {} in {:.2} s", bytes(written), t.elapsed().as_secs_f64());
    let script = format!(
        "-- seed 002's source, on the file connector
CREATE SOURCE opra_quotes (
    ticker VARCHAR,
    timestamp TIMESTAMP,
    bid_price DOUBLE,
    ask_price DOUBLE,
    ...
) WITH (
    'connector' = 'file',
    'path'      = '{data}',
    'encoding'  = 'protobuf',
    'message'   = '{QUOTE_MESSAGE}',
    'location'  = '{pb}'
);
SELECT ticker, count(*) AS quotes, min(bid_price) AS min_bid, max(ask_price) AS max_ask, avg(bid_size) AS avg_bid_size
FROM opra_quotes GROUP BY ticker ORDER BY quotes DESC, ticker LIMIT 10;",
        data = data.display(),
        pb = dir.join("descriptors/stocks.pb").display(),
    );
    eprintln!("\n{script}\n");
    let engine = Engine::new(EngineOptions {
        partitions: partitions.unwrap_or(0),
        ..EngineOptions::default()
    });
    let mut out = ResultWriter::stdout_table(false);
    let started = Instant::now();
    let progress = start_progress(&engine, quiet);
    let result = engine.run_script(&script, &mut out).await;
    progress.stop();
    result?;
    out.finish()?;
    let secs = started.elapsed().as_secs_f64();
    let r = engine.source_reports();
    let msgs: u64 = r.iter().map(|s| s.messages).sum();
    let b: u64 = r.iter().map(|s| s.bytes).sum();
    println!(
        "{} quotes ({}) decoded and grouped in {:.2} s: {} quotes/s, {}/s on {} partitions",
        count(msgs),
        bytes(b),
        secs,
        count((msgs as f64 / secs) as u64),
        bytes((b as f64 / secs) as u64),
        engine.partitions(),
    );
    Ok(())
}

enum OutputMode {
    Stdout(SinkFormat),
    File(PathBuf, SinkFormat),
}

/// Where `SELECT` rows go: a table per statement on standard output, or one file for all.
struct ResultWriter {
    mode: OutputMode,
    writer: Option<(SchemaRef, Box<dyn BatchWriter>)>,
    streaming: bool,
}

impl ResultWriter {
    fn stdout_table(streaming: bool) -> Self {
        Self {
            mode: OutputMode::Stdout(SinkFormat::Table),
            writer: None,
            streaming,
        }
    }

    fn file(path: PathBuf) -> Result<Self> {
        let format = SinkFormat::from_path(&path)?;
        if path.exists() && path.is_dir() {
            bail!("--output {} is a directory", path.display());
        }
        Ok(Self {
            mode: OutputMode::File(path, format),
            writer: None,
            streaming: false,
        })
    }

    fn finish(&mut self) -> Result<()> {
        if let Some((_, mut w)) = self.writer.take() {
            w.finish()?;
        }
        std::io::stdout().flush().ok();
        Ok(())
    }
}

impl ResultOutput for ResultWriter {
    fn begin(&mut self, schema: &SchemaRef) -> Result<(), SinkError> {
        match &self.mode {
            OutputMode::Stdout(format) => {
                // Each statement prints on its own.
                if let Some((_, mut w)) = self.writer.take() {
                    w.finish()?;
                }
                let w = open_writer(*format, Target::Stdout, schema, &Options::default(), self.streaming)?;
                self.writer = Some((Arc::clone(schema), w));
            }
            OutputMode::File(path, format) => match &self.writer {
                Some((s, _)) if s.fields() != schema.fields() => {
                    return Err(SinkError::Options(format!(
                        "--output {} already holds rows of another shape; write one SELECT per file",
                        path.display()
                    )))
                }
                Some(_) => {}
                None => {
                    let w = open_writer(*format, Target::File(path.clone()), schema, &Options::default(), false)?;
                    self.writer = Some((Arc::clone(schema), w));
                }
            },
        }
        Ok(())
    }

    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        match &mut self.writer {
            Some((_, w)) => w.write(batch),
            None => Err(SinkError::Options("rows before the statement began".into())),
        }
    }

    fn end(&mut self) -> Result<(), SinkError> {
        if matches!(self.mode, OutputMode::Stdout(_)) {
            if let Some((_, mut w)) = self.writer.take() {
                w.finish()?;
            }
        }
        Ok(())
    }
}
