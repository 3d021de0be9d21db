//! The `weir` program: run SQL pipelines, generate quotes, send files to Kafka, decode files,
//! inspect a state directory, and the demo. This file is the command line; each command's work
//! is in `cli/`.

mod cli;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use weir_codec::Framing;
use weir_testdata::DEFAULT_SEED;

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
    /// Log level of weir's own messages on standard error (libraries log at warn); RUST_LOG,
    /// when set, wins (tracing's syntax: `debug`, `warn,weir_kafka=debug`).
    #[arg(long, global = true, value_enum, default_value_t = LogLevel::Info)]
    log_level: LogLevel,
    /// How log lines are written: text, or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = LogFormatArg::Text)]
    log_format: LogFormatArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogLevel {
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the statements of a SQL file in order (CREATE SOURCE, CREATE SINK, INSERT, SELECT, ...).
    Run {
        /// The SQL file.
        pipeline: PathBuf,
        /// Keep reading at the end of the sources; sink pipelines run until Ctrl-C or SIGTERM.
        #[arg(long)]
        follow: bool,
        /// Write SELECT results to this file instead of printing a table (.parquet, .arrow,
        /// .arrows, .jsonl or .txt).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Readers per source scan and DataFusion partitions [default: the cores this process may
        /// use, CPU affinity and cgroup quota included].
        #[arg(long)]
        partitions: Option<usize>,
        /// Rows per batch.
        #[arg(long, default_value_t = weir_codec::DEFAULT_BATCH_SIZE)]
        batch_size: usize,
        /// No progress line and no summary.
        #[arg(long, short)]
        quiet: bool,
        /// Kafka client properties (a Java properties file with librdkafka's names:
        /// security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...), as Kafka's
        /// own tools take --command-config; the defaults of every Kafka source; values may be ${env:NAME} or ${file:PATH}.
        #[arg(long, value_name = "FILE")]
        kafka_config: Option<PathBuf>,
        /// Serve Prometheus metrics on this address (HOST:PORT): /metrics, /health, and
        /// /ready (503 until every source has connected and read). Off by default.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<String>,
    },
    /// Generate synthetic data.
    Gen {
        #[command(subcommand)]
        what: GenWhat,
    },
    /// Decode a file of messages and print them (like `protoc --decode` meets `kcat`).
    Decode {
        /// How the messages are encoded.
        #[arg(long, value_enum, default_value_t = DecodeEncoding::Protobuf)]
        encoding: DecodeEncoding,
        /// The schema: a .proto file or a descriptor set (.pb, .desc) for protobuf; the
        /// writer's schema (.avsc) for avro.
        #[arg(long)]
        location: PathBuf,
        /// The full message name, for example stocks.QuoteNBBO (protobuf only, required there).
        #[arg(long)]
        message: Option<String>,
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
        /// Kafka client properties (a Java properties file with librdkafka's names:
        /// security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...), as Kafka's
        /// own tools take --command-config; values may be ${env:NAME} or ${file:PATH}.
        #[arg(long, value_name = "FILE")]
        kafka_config: Option<PathBuf>,
    },
    /// Print what a source's state directory ('state.dir') holds: the last checkpoint (step,
    /// read positions, files) and the dedup statistics as of the last commit.
    Stats {
        /// The state directory.
        state_dir: PathBuf,
    },
    /// Compact a Delta table's small files into files of about --target-file-size within
    /// each partition (Delta's OPTIMIZE: one commit that changes no rows; the old files stay until VACUUM). It may run
    /// while a weir sink writes the table: the sink's txn versions are left alone.
    Compact {
        /// The table: a local directory or an s3://, gs://, az://, abfss:// or file:// URL.
        table: String,
        /// An object-storage option as a delta sink takes it (s3.endpoint=..., s3.region=...,
        /// s3.access.key.id=..., s3.secret.access.key=${env:NAME}, ...); repeatable.
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
        /// The size of the files compaction writes.
        #[arg(long, default_value = "128MB")]
        target_file_size: String,
    },
    /// Generate quotes, run the options-quotes source and a GROUP BY ticker query, print the top
    /// groups and the throughput. Needs no broker.
    Demo {
        /// Quotes to generate.
        #[arg(long, default_value_t = 5_000_000)]
        count: u64,
        /// Readers per source scan [default: the cores this process may use].
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
    /// Options quotes (stocks.QuoteNBBO, 10,000 OPRA option symbols).
    Quotes {
        /// How many quotes.
        #[arg(long, default_value_t = 1_000_000)]
        count: u64,
        /// Message encoding.
        #[arg(long, value_enum, default_value_t = FormatArg::Protobuf)]
        format: FormatArg,
        /// Framing in the file [default: varint for protobuf and avro, lines for json].
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
        /// Batch compression when sending to Kafka: none, gzip, snappy, lz4, zstd. With
        /// --framing avro-container, the blocks' codec: none, deflate, snappy, zstd.
        #[arg(long, default_value = "none")]
        compression: String,
        /// Seed: the same seed gives the same bytes.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
        /// Also write the schemas into this directory: stocks.proto, its descriptor set
        /// stocks.pb, and stocks.avsc.
        #[arg(long)]
        schema_dir: Option<PathBuf>,
        /// Share of quotes (0 to 1) that repeat one of the last few thousand exactly, the same
        /// (ticker, sequence_number), as producer retries would; for dedup.
        #[arg(long, default_value_t = 0.0)]
        duplicates: f64,
        /// Event time of the first quote (RFC 3339) [default: 2026-03-02T14:30:00Z].
        #[arg(long)]
        start: Option<String>,
        /// Quotes per second of event time, on average [default: 1000000].
        #[arg(long)]
        per_second: Option<u64>,
        /// Kafka client properties (a Java properties file with librdkafka's names:
        /// security.protocol, sasl.mechanism, sasl.username, ssl.ca.location, ...), as Kafka's
        /// own tools take --command-config; values may be ${env:NAME} or ${file:PATH}.
        #[arg(long, value_name = "FILE")]
        kafka_config: Option<PathBuf>,
        /// With --to: register the format's schema (stocks.avsc for avro, stocks.proto for
        /// protobuf) with this schema registry and write each value in its framing (magic
        /// byte, schema id, and for protobuf the message indexes), as Confluent's serializers
        /// do.
        #[arg(long, value_name = "URL")]
        schema_registry_url: Option<String>,
        /// The subject --schema-registry-url registers the schema under [default:
        /// <topic>-value, the topic name strategy].
        #[arg(long)]
        subject: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DecodeEncoding {
    Protobuf,
    /// Binary Avro datums of the schema given by --location.
    Avro,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Protobuf,
    Json,
    /// Binary Avro of stocks.avsc (--schema-dir writes it).
    Avro,
}

#[derive(Clone, Copy, ValueEnum)]
enum FramingArg {
    Varint,
    U32be,
    Lines,
    /// An Avro object container file (`gen --format avro`, `decode`; not `produce`).
    AvroContainer,
}

impl From<FramingArg> for Framing {
    fn from(f: FramingArg) -> Self {
        match f {
            FramingArg::Varint => Framing::Varint,
            FramingArg::U32be => Framing::U32Be,
            FramingArg::Lines => Framing::Lines,
            FramingArg::AvroContainer => Framing::AvroContainer,
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
    let level = match cli.log_level {
        LogLevel::Off => tracing_subscriber::filter::LevelFilter::OFF,
        LogLevel::Error => tracing_subscriber::filter::LevelFilter::ERROR,
        LogLevel::Warn => tracing_subscriber::filter::LevelFilter::WARN,
        LogLevel::Info => tracing_subscriber::filter::LevelFilter::INFO,
        LogLevel::Debug => tracing_subscriber::filter::LevelFilter::DEBUG,
        LogLevel::Trace => tracing_subscriber::filter::LevelFilter::TRACE,
    };
    let format = match cli.log_format {
        LogFormatArg::Text => cli::log::LogFormat::Text,
        LogFormatArg::Json => cli::log::LogFormat::Json,
    };
    if let Err(e) = cli::log::init(level, format) {
        eprintln!("error: {}", cli::one_line(&e));
        std::process::exit(1);
    }
    if let Err(e) = run(cli) {
        eprintln!("error: {}", cli::one_line(&e));
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run {
            pipeline,
            follow,
            output,
            partitions,
            batch_size,
            quiet,
            kafka_config,
            metrics_addr,
        } => cli::run::run(cli::run::RunArgs {
            pipeline,
            follow,
            output,
            partitions,
            batch_size,
            quiet,
            kafka_config,
            metrics_addr,
        }),
        Command::Gen {
            what:
                GenWhat::Quotes {
                    count,
                    format,
                    framing,
                    out,
                    to,
                    topic_partitions,
                    compression,
                    seed,
                    schema_dir,
                    duplicates,
                    kafka_config,
                    start,
                    per_second,
                    schema_registry_url,
                    subject,
                },
        } => cli::gen::quotes(cli::gen::QuoteArgs {
            count,
            format: match format {
                FormatArg::Protobuf => weir_testdata::QuoteFormat::Protobuf,
                FormatArg::Json => weir_testdata::QuoteFormat::Json,
                FormatArg::Avro => weir_testdata::QuoteFormat::Avro,
            },
            framing: framing.map(Framing::from),
            out,
            to,
            topic_partitions,
            compression,
            seed,
            schema_dir,
            duplicates,
            kafka_config,
            start,
            per_second,
            schema_registry_url,
            subject,
        }),
        Command::Decode {
            encoding,
            location,
            message,
            input,
            framing,
            proto_include,
            output,
            limit,
            skip_errors,
        } => cli::decode::decode(cli::decode::DecodeArgs {
            avro: matches!(encoding, DecodeEncoding::Avro),
            location,
            message,
            input,
            framing: framing.into(),
            includes: proto_include,
            output: match output {
                DecodeOutput::Jsonl => weir::StdoutFormat::JsonLines,
                DecodeOutput::Ipc => weir::StdoutFormat::IpcStream,
                DecodeOutput::Table => weir::StdoutFormat::Table,
            },
            limit,
            skip_errors,
        }),
        Command::Produce {
            input,
            framing,
            to,
            topic_partitions,
            compression,
            kafka_config,
        } => cli::produce::produce(
            &input,
            framing.into(),
            &to,
            topic_partitions,
            &compression,
            kafka_config.as_deref(),
        ),
        Command::Stats { state_dir } => cli::stats::stats(&state_dir),
        Command::Compact {
            table,
            options,
            target_file_size,
        } => cli::compact::compact(&table, &options, &target_file_size),
        Command::Demo {
            count,
            partitions,
            dir,
            quiet,
        } => cli::demo::demo(count, partitions, dir, quiet),
    }
}
