//! A hand-written decoder plugged into weir: a statically typed decoder for `stocks.QuoteNBBO`
//! (a `prost`-derived struct and concrete Arrow builders, the way a team speeds up one hot
//! message type by hand), registered as the encoding `custom.proto+stocks.QuoteNBBO` and used
//! from SQL exactly like the built-in ones.
//!
//! A factory prepares once per source ([`DecoderFactory::prepare`]: here it maps the declared
//! columns onto the twelve it knows) and each partition takes a decoder of its own from the
//! preparation ([`PreparedDecoder::decoder`]).
//!
//! ```text
//! cargo run --release -p weir --example custom_decoder -- [--count N]
//! cargo run --release -p weir --example custom_decoder -- --file quotes.bin --encoding custom|protobuf
//! ```
//!
//! The first form generates quotes into a temporary directory and runs the `GROUP BY ticker`
//! query with both encodings. The second runs the query once on an existing file (the end-to-end
//! benchmark uses it, one process per encoding, to measure throughput and peak memory).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::builder::{
    Float64Builder, Int32Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt32Builder,
};
use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use prost::Message;
use weir::{Engine, EngineOptions, ResultOutput, SinkError};
use weir_codec::{
    CodecError, DecodeError, DecodeErrorKind, Decoder, DecoderFactory, DecoderRequest, PlanError,
    PreparedDecoder,
};

/// `stocks.QuoteBase`, as prost-build would generate it.
#[derive(Clone, PartialEq, Message)]
pub struct QuoteBase {
    /// The option symbol.
    #[prost(string, tag = "1")]
    pub ticker: String,
    /// Epoch nanoseconds.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
    /// The feed's sequence number.
    #[prost(int64, tag = "3")]
    pub sequence_number: i64,
}

/// `stocks.QuoteNBBO`, as prost-build would generate it.
#[derive(Clone, PartialEq, Message)]
pub struct QuoteNbbo {
    /// The ticker, time and sequence number.
    #[prost(message, optional, tag = "1")]
    pub base: Option<QuoteBase>,
    /// Bid price in dollars.
    #[prost(double, tag = "2")]
    pub bid_price: f64,
    /// Bid size in contracts.
    #[prost(uint32, tag = "3")]
    pub bid_size: u32,
    /// Bid exchange id.
    #[prost(uint32, tag = "4")]
    pub bid_exchange: u32,
    /// Ask price in dollars.
    #[prost(double, tag = "5")]
    pub ask_price: f64,
    /// Ask size in contracts.
    #[prost(uint32, tag = "6")]
    pub ask_size: u32,
    /// Ask exchange id.
    #[prost(uint32, tag = "7")]
    pub ask_exchange: u32,
    /// Condition code.
    #[prost(int32, tag = "8")]
    pub conditions: i32,
    /// Indicator code.
    #[prost(int32, tag = "9")]
    pub indicators: i32,
    /// Tape (1..=3).
    #[prost(uint32, tag = "10")]
    pub tape: u32,
}

/// The columns this decoder knows, with their types.
fn known_columns() -> Vec<Field> {
    vec![
        Field::new("ticker", DataType::Utf8, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            true,
        ),
        Field::new("sequence_number", DataType::Int64, true),
        Field::new("bid_price", DataType::Float64, false),
        Field::new("bid_size", DataType::UInt32, false),
        Field::new("bid_exchange", DataType::UInt32, false),
        Field::new("ask_price", DataType::Float64, false),
        Field::new("ask_size", DataType::UInt32, false),
        Field::new("ask_exchange", DataType::UInt32, false),
        Field::new("conditions", DataType::Int32, false),
        Field::new("indicators", DataType::Int32, false),
        Field::new("tape", DataType::UInt32, false),
    ]
}

/// Builds [`StocksQuoteNbboDecoder`]s for the columns a source declares (any subset of the
/// twelve, in any order).
#[derive(Debug, Default)]
pub struct StocksQuoteNbboDecoderFactory;

impl DecoderFactory for StocksQuoteNbboDecoderFactory {
    fn prepare(
        &self,
        request: &DecoderRequest<'_>,
    ) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        let known = known_columns();
        let mut order = Vec::new();
        let mut fields = Vec::new();
        for c in request.columns {
            let Some(i) = known.iter().position(|f| f.name() == &c.name) else {
                return Err(CodecError::Plan(PlanError::UnknownField {
                    column: c.name.clone(),
                    message: "stocks.QuoteNBBO".into(),
                    field: c.name.clone(),
                }));
            };
            if known[i].data_type() != &c.data_type {
                return Err(CodecError::Other(format!(
                    "column '{}' must be {} for this decoder, not {}",
                    c.name,
                    known[i].data_type(),
                    c.data_type
                )));
            }
            order.push(i);
            fields.push(known[i].clone());
        }
        Ok(Arc::new(PreparedQuoteDecoder {
            schema: Arc::new(Schema::new(fields)),
            order,
            batch_size: request.batch_size,
        }))
    }

    fn default_columns(
        &self,
        _options: &weir_codec::Options,
    ) -> Result<Vec<weir_codec::ColumnSpec>, CodecError> {
        Ok(known_columns()
            .iter()
            .map(|f| weir_codec::ColumnSpec::new(f.name(), f.data_type().clone()))
            .collect())
    }

    fn confluent_message_indexes(&self) -> bool {
        true
    }
}

/// The decoder prepared for a source's columns: which of the twelve, in which order. Each
/// partition gets a [`StocksQuoteNbboDecoder`] of its own from it.
pub struct PreparedQuoteDecoder {
    schema: SchemaRef,
    order: Vec<usize>,
    batch_size: usize,
}

impl PreparedDecoder for PreparedQuoteDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decoder(&self) -> Box<dyn Decoder> {
        Box::new(StocksQuoteNbboDecoder::new(
            Arc::clone(&self.schema),
            self.order.clone(),
            self.batch_size,
        ))
    }

    fn project(&self, columns: &[usize]) -> Result<Arc<dyn PreparedDecoder>, CodecError> {
        // Only the columns a query reads are built: the others are never appended to.
        let schema = self
            .schema
            .project(columns)
            .map_err(|e| CodecError::Other(e.to_string()))?;
        Ok(Arc::new(PreparedQuoteDecoder {
            schema: Arc::new(schema),
            order: columns.iter().map(|&c| self.order[c]).collect(),
            batch_size: self.batch_size,
        }))
    }
}

/// The hand-written decoder: `prost::Message::decode`, then concrete builders.
pub struct StocksQuoteNbboDecoder {
    schema: SchemaRef,
    order: Vec<usize>,
    ticker: StringBuilder,
    timestamp: TimestampNanosecondBuilder,
    sequence_number: Int64Builder,
    bid_price: Float64Builder,
    bid_size: UInt32Builder,
    bid_exchange: UInt32Builder,
    ask_price: Float64Builder,
    ask_size: UInt32Builder,
    ask_exchange: UInt32Builder,
    conditions: Int32Builder,
    indicators: Int32Builder,
    tape: UInt32Builder,
    batch_size: usize,
    len: usize,
}

impl StocksQuoteNbboDecoder {
    fn new(schema: SchemaRef, order: Vec<usize>, batch_size: usize) -> Self {
        Self {
            schema,
            order,
            ticker: StringBuilder::new(),
            timestamp: TimestampNanosecondBuilder::new(),
            sequence_number: Int64Builder::new(),
            bid_price: Float64Builder::new(),
            bid_size: UInt32Builder::new(),
            bid_exchange: UInt32Builder::new(),
            ask_price: Float64Builder::new(),
            ask_size: UInt32Builder::new(),
            ask_exchange: UInt32Builder::new(),
            conditions: Int32Builder::new(),
            indicators: Int32Builder::new(),
            tape: UInt32Builder::new(),
            batch_size: batch_size.max(1),
            len: 0,
        }
    }
}

impl Decoder for StocksQuoteNbboDecoder {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn decode(&mut self, bytes: &[u8]) -> Result<(), DecodeError> {
        // prost does not say where a message went wrong; report the whole message.
        let msg = QuoteNbbo::decode(bytes).map_err(|e| DecodeError {
            offset: 0,
            kind: DecodeErrorKind::Other(format!("prost: {e}")),
        })?;
        if let Some(base) = &msg.base {
            self.ticker.append_value(&base.ticker);
            self.timestamp.append_value(base.timestamp);
            self.sequence_number.append_value(base.sequence_number);
        } else {
            self.ticker.append_null();
            self.timestamp.append_null();
            self.sequence_number.append_null();
        }
        self.bid_price.append_value(msg.bid_price);
        self.bid_size.append_value(msg.bid_size);
        self.bid_exchange.append_value(msg.bid_exchange);
        self.ask_price.append_value(msg.ask_price);
        self.ask_size.append_value(msg.ask_size);
        self.ask_exchange.append_value(msg.ask_exchange);
        self.conditions.append_value(msg.conditions);
        self.indicators.append_value(msg.indicators);
        self.tape.append_value(msg.tape);
        self.len += 1;
        Ok(())
    }

    fn buffered_rows(&self) -> usize {
        self.len
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    fn flush(&mut self) -> Option<RecordBatch> {
        if self.len == 0 {
            return None;
        }
        let all: [ArrayRef; 12] = [
            Arc::new(self.ticker.finish()),
            Arc::new(self.timestamp.finish()),
            Arc::new(self.sequence_number.finish()),
            Arc::new(self.bid_price.finish()),
            Arc::new(self.bid_size.finish()),
            Arc::new(self.bid_exchange.finish()),
            Arc::new(self.ask_price.finish()),
            Arc::new(self.ask_size.finish()),
            Arc::new(self.ask_exchange.finish()),
            Arc::new(self.conditions.finish()),
            Arc::new(self.indicators.finish()),
            Arc::new(self.tape.finish()),
        ];
        let columns = self.order.iter().map(|&i| Arc::clone(&all[i])).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(self.len));
        self.len = 0;
        RecordBatch::try_new_with_options(Arc::clone(&self.schema), columns, &options).ok()
    }
}

/// Prints SELECT results as a table.
#[derive(Default)]
pub struct PrintTable {
    schema: Option<SchemaRef>,
    batches: Vec<RecordBatch>,
}

impl ResultOutput for PrintTable {
    fn begin(&mut self, schema: &SchemaRef) -> Result<(), SinkError> {
        self.schema = Some(Arc::clone(schema));
        self.batches.clear();
        Ok(())
    }
    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.batches.push(batch.clone());
        Ok(())
    }
    fn end(&mut self) -> Result<(), SinkError> {
        match arrow::util::pretty::pretty_format_batches(&self.batches) {
            Ok(t) => println!("{t}"),
            Err(e) => eprintln!("cannot print: {e}"),
        }
        Ok(())
    }
}

/// The options-quotes source and query over `file`, with the given encoding.
pub fn pipeline(file: &str, descriptor: &str, encoding: &str) -> String {
    // The same columns for both; the built-in decoder finds ticker and timestamp in `base`.
    let declared =
        "ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED";
    format!(
        "CREATE SOURCE opra_quotes ({declared}) WITH (
    'connector' = 'file',
    'path' = '{file}',
    'encoding' = '{encoding}'{}
);
SELECT ticker, count(*) AS quotes, min(bid_price) AS min_bid, max(ask_price) AS max_ask, avg(bid_size) AS avg_bid_size
FROM opra_quotes GROUP BY ticker ORDER BY quotes DESC, ticker LIMIT 5;",
        if encoding == "protobuf" {
            format!(",\n    'message' = 'stocks.QuoteNBBO',\n    'location' = '{descriptor}'")
        } else {
            String::new()
        }
    )
}

/// An engine with the custom encoding registered.
pub fn engine(partitions: usize) -> Engine {
    let engine = Engine::new(EngineOptions {
        partitions,
        ..EngineOptions::default()
    });
    engine
        .register_encoding(
            "custom.proto+stocks.QuoteNBBO",
            Some(Arc::new(StocksQuoteNbboDecoderFactory)),
            None,
        )
        .expect("a valid registration");
    engine
}

#[allow(dead_code)]
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let partitions: usize = arg("--partitions")
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(0);
    let dir = tempfile::tempdir()?;
    let descriptor = dir.path().join("stocks.pb");
    std::fs::write(dir.path().join("stocks.proto"), weir_testdata::STOCKS_PROTO)?;
    let set = weir_codec::ProtoSchema::load(dir.path().join("stocks.proto"), &[])?;
    std::fs::write(&descriptor, set.descriptor_set_bytes())?;
    let (file, encodings) = match arg("--file") {
        Some(f) => (
            f,
            vec![arg("--encoding").unwrap_or_else(|| "custom".into())],
        ),
        None => {
            let count: u64 = arg("--count")
                .map(|c| c.parse())
                .transpose()?
                .unwrap_or(1_000_000);
            let path = dir.path().join("quotes.bin");
            let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
            weir_testdata::QuoteGenerator::new(weir_testdata::DEFAULT_SEED).write(
                &mut out,
                count,
                weir_testdata::QuoteFormat::Protobuf,
                weir_codec::Framing::Varint,
            )?;
            (
                path.display().to_string(),
                vec!["custom".to_string(), "protobuf".to_string()],
            )
        }
    };
    let runtime = tokio::runtime::Runtime::new()?;
    for encoding in encodings {
        let encoding = match encoding.as_str() {
            "custom" => "custom.proto+stocks.QuoteNBBO".to_string(),
            other => other.to_string(),
        };
        let engine = engine(partitions);
        let script = pipeline(&file, &descriptor.display().to_string(), &encoding);
        let started = Instant::now();
        runtime.block_on(engine.run_script(&script, &mut PrintTable::default()))?;
        let secs = started.elapsed().as_secs_f64();
        let messages: u64 = engine.source_reports().iter().map(|r| r.messages).sum();
        println!(
            "encoding {encoding}: {messages} messages in {secs:.3} s = {:.0} msg/s on {} partitions",
            messages as f64 / secs,
            engine.partitions()
        );
    }
    Ok(())
}
