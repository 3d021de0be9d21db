//! Workload 1: the options-quotes workload's `stocks.QuoteNBBO` (OPRA NBBO option quotes), 12 columns.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_array::builder::{
    Float64Builder, Int32Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder,
    UInt32Builder,
};
use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use prost::Message;
use prost_reflect::DescriptorPool;
use weir_codec::{ColumnSpec, ProtoSchema};

use crate::peers::{PtarsDecoder, ReflectDecoder, WeirDecoder};
use crate::{descriptor_set, stocks_dir, Contender, Corpus, Result, BATCH_SIZE};
use weir_testdata::Rng;

/// Fully qualified message name.
pub const MESSAGE: &str = "stocks.QuoteNBBO";
/// Messages per run.
pub const MESSAGES: usize = 1_000_000;
/// Distinct option symbols.
pub const TICKERS: usize = 10_000;
/// The generator's seed.
pub const SEED: u64 = 0x5EED_0002;

/// `stocks.QuoteBase`, as prost-build would generate it.
#[derive(Clone, PartialEq, Message)]
pub struct QuoteBase {
    #[prost(string, tag = "1")]
    pub ticker: String,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
    #[prost(int64, tag = "3")]
    pub sequence_number: i64,
}

/// `stocks.QuoteNBBO`, as prost-build would generate it.
#[derive(Clone, PartialEq, Message)]
pub struct QuoteNbbo {
    #[prost(message, optional, tag = "1")]
    pub base: Option<QuoteBase>,
    #[prost(double, tag = "2")]
    pub bid_price: f64,
    #[prost(uint32, tag = "3")]
    pub bid_size: u32,
    #[prost(uint32, tag = "4")]
    pub bid_exchange: u32,
    #[prost(double, tag = "5")]
    pub ask_price: f64,
    #[prost(uint32, tag = "6")]
    pub ask_size: u32,
    #[prost(uint32, tag = "7")]
    pub ask_exchange: u32,
    #[prost(int32, tag = "8")]
    pub conditions: i32,
    #[prost(int32, tag = "9")]
    pub indicators: i32,
    #[prost(uint32, tag = "10")]
    pub tape: u32,
}

/// Underlyings and a rough spot price, for plausible strikes.
const UNDERLYINGS: &[(&str, u32)] = &[
    ("SPY", 650),
    ("SPXW", 6500),
    ("QQQ", 560),
    ("IWM", 235),
    ("AAPL", 230),
    ("TSLA", 420),
    ("NVDA", 180),
    ("AMZN", 225),
    ("MSFT", 510),
    ("META", 740),
    ("GOOG", 240),
    ("AMD", 160),
    ("NFLX", 1200),
    ("AVGO", 340),
    ("PLTR", 180),
    ("COIN", 320),
    ("MSTR", 350),
    ("HOOD", 120),
    ("UBER", 95),
    ("JPM", 300),
    ("BAC", 50),
    ("XLF", 53),
    ("SOFI", 25),
    ("INTC", 24),
    ("F", 12),
    ("T", 28),
    ("C", 95),
    ("GE", 270),
    ("NIO", 6),
    ("SMCI", 45),
];

/// Expiries (YYMMDD) through 2026 and a January 2027 LEAP.
const EXPIRIES: &[&str] = &[
    "260306", "260313", "260320", "260327", "260402", "260410", "260417", "260515", "260618",
    "260717", "260821", "260918", "261016", "261120", "261218", "270115",
];

/// `n` distinct OPRA option symbols (`O:SPY251219C00650000`, 18 to 21 characters).
pub fn tickers(rng: &mut Rng, n: usize) -> Vec<String> {
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let (underlying, spot) = *rng.pick(UNDERLYINGS);
        let expiry = rng.pick(EXPIRIES);
        let right = if rng.chance(0.5) { 'C' } else { 'P' };
        // Strikes within +-30% of spot on a grid of 0.5 (cheap names), 1, 5 or 10.
        let step_millis: u64 = match spot {
            0..=30 => 500,
            31..=300 => 1_000,
            301..=2_000 => 5_000,
            _ => 10_000,
        };
        let lo = u64::from(spot) * 700;
        let hi = u64::from(spot) * 1_300;
        let strike = rng.range(lo / step_millis, hi / step_millis).max(1) * step_millis;
        let symbol = format!("O:{underlying}{expiry}{right}{strike:08}");
        if seen.insert(symbol.clone()) {
            out.push(symbol);
        }
    }
    out
}

/// `n` quotes over [`TICKERS`] symbols: nanosecond timestamps from 2026-03-02 14:30 UTC, a
/// feed sequence number, two-decimal prices with ask > bid, sizes 1..=500, exchanges 1..=20.
pub fn generate(n: usize, seed: u64) -> Corpus {
    let mut rng = Rng::new(seed);
    let tickers = tickers(&mut rng, TICKERS);
    // Per-symbol mid price in cents, log-uniform from 5 cents to $80.
    let mut mids: Vec<i64> = (0..TICKERS)
        .map(|_| (5.0 * 1_600f64.powf(rng.unit())) as i64)
        .collect();
    let mut corpus = Corpus::with_capacity(n, 80);
    let mut timestamp: i64 = 1_772_461_800_000_000_000; // 2026-03-02T14:30:00Z
    for i in 0..n {
        let sequence_number = 1_250_000_001 + i as i64;
        // Half the traffic on the 500 busiest contracts, the rest spread over all of them.
        let t = if rng.chance(0.5) {
            rng.below(500)
        } else {
            rng.below(TICKERS as u64)
        } as usize;
        timestamp += rng.range(1, 2_000) as i64;
        let mid = &mut mids[t];
        *mid = (*mid + rng.range_i64(-3, 3)).max(2);
        let spread = rng.range(1, (*mid as u64 / 20).clamp(1, 50)) as i64;
        let bid = (*mid - spread / 2).max(1);
        let ask = bid + spread;
        let quote = QuoteNbbo {
            base: Some(QuoteBase {
                ticker: tickers[t].clone(),
                timestamp,
                sequence_number,
            }),
            bid_price: bid as f64 / 100.0,
            bid_size: rng.range(1, 500) as u32,
            bid_exchange: rng.range(1, 20) as u32,
            ask_price: ask as f64 / 100.0,
            ask_size: rng.range(1, 500) as u32,
            ask_exchange: rng.range(1, 20) as u32,
            conditions: if rng.chance(0.8) {
                0
            } else {
                rng.range(1, 60) as i32
            },
            indicators: if rng.chance(0.9) {
                0
            } else {
                rng.range(1, 10) as i32
            },
            tape: rng.range(1, 3) as u32,
        };
        corpus.push(&quote);
    }
    corpus
}

/// The Arrow schema of the 12 columns (shared by the "before" and "after" decoders).
pub fn arrow_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
    Arc::new(Schema::new(vec![
        Field::new("ticker", DataType::Utf8, true),
        Field::new("timestamp", ts, true),
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
    ]))
}

/// The 12 columns as weir column specs (explicit paths for the three nested ones).
pub fn weir_columns() -> Vec<ColumnSpec> {
    vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None))
            .with_path("base.timestamp"),
        ColumnSpec::new("sequence_number", DataType::Int64).with_path("base.sequence_number"),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("bid_exchange", DataType::UInt32),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("ask_size", DataType::UInt32),
        ColumnSpec::new("ask_exchange", DataType::UInt32),
        ColumnSpec::new("conditions", DataType::Int32),
        ColumnSpec::new("indicators", DataType::Int32),
        ColumnSpec::new("tape", DataType::UInt32),
    ]
}

// ---------------------------------------------------------------------------------------------
// b. "after": prost-derive struct + concrete builders
// ---------------------------------------------------------------------------------------------

/// The generated-code decoder: `QuoteNbbo::decode` (prost-derive) and one concrete builder per
/// column, nulls for the three `base` columns when `base` is absent.
pub struct StocksQuoteNbboDecoder {
    schema: SchemaRef,
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

impl Default for StocksQuoteNbboDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StocksQuoteNbboDecoder {
    /// A decoder producing [`arrow_schema`] batches of [`BATCH_SIZE`] rows.
    pub fn new() -> Self {
        let n = BATCH_SIZE;
        Self {
            schema: arrow_schema(),
            ticker: StringBuilder::with_capacity(n, n * 24),
            timestamp: TimestampNanosecondBuilder::with_capacity(n),
            sequence_number: Int64Builder::with_capacity(n),
            bid_price: Float64Builder::with_capacity(n),
            bid_size: UInt32Builder::with_capacity(n),
            bid_exchange: UInt32Builder::with_capacity(n),
            ask_price: Float64Builder::with_capacity(n),
            ask_size: UInt32Builder::with_capacity(n),
            ask_exchange: UInt32Builder::with_capacity(n),
            conditions: Int32Builder::with_capacity(n),
            indicators: Int32Builder::with_capacity(n),
            tape: UInt32Builder::with_capacity(n),
            batch_size: n,
            len: 0,
        }
    }

    /// Decodes one message and appends it as one row.
    #[inline]
    pub fn decode_message(&mut self, bytes: &[u8]) -> Result<()> {
        // prost::Message::decode: static, generated code.
        let msg = QuoteNbbo::decode(bytes)?;

        // Direct field access: no lookups, no pattern matching.
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

    /// Takes every buffered row as one batch.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        Ok(RecordBatch::try_new(
            self.schema.clone(),
            vec![
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
            ],
        )?)
    }
}

impl Contender for StocksQuoteNbboDecoder {
    fn name(&self) -> &str {
        "b_prost_derive"
    }

    fn run(&mut self, corpus: &Corpus, sink: &mut dyn FnMut(RecordBatch)) -> Result<()> {
        for message in corpus.iter() {
            self.decode_message(message)?;
            if self.len >= self.batch_size {
                sink(self.finish()?);
            }
        }
        if self.len > 0 {
            sink(self.finish()?);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------------

/// The encoded quotes and the schemas every contender needs.
pub struct QuoteWorkload {
    /// The encoded messages.
    pub corpus: Corpus,
    /// `stocks.proto` compiled by protox, as an encoded `FileDescriptorSet`.
    pub descriptor_set: Vec<u8>,
    /// `stocks.proto` loaded by weir.
    pub weir_schema: ProtoSchema,
}

impl QuoteWorkload {
    /// Generates `messages` quotes and loads the schema.
    pub fn new(messages: usize) -> Result<Self> {
        let descriptor_set = descriptor_set("stocks.proto")?;
        let weir_schema = ProtoSchema::from_proto_file(stocks_dir().join("stocks.proto"), &[])?;
        Ok(Self {
            corpus: generate(messages, SEED),
            descriptor_set,
            weir_schema,
        })
    }

    /// a. the reflection "before" decoder.
    pub fn before(&self) -> Result<ReflectDecoder> {
        let pool = DescriptorPool::decode(self.descriptor_set.as_slice())?;
        let base = Some("base".to_string());
        let mut parents = vec![base.clone(), base.clone(), base];
        parents.resize(12, None);
        ReflectDecoder::new("a_prost_reflect", &pool, MESSAGE, arrow_schema(), parents)
    }

    /// b. the generated-code "after" decoder.
    pub fn after(&self) -> StocksQuoteNbboDecoder {
        StocksQuoteNbboDecoder::new()
    }

    /// c. ptars.
    pub fn ptars(&self) -> Result<PtarsDecoder> {
        PtarsDecoder::new("c_ptars", &self.descriptor_set, MESSAGE)
    }

    /// d. weir, 12 columns.
    pub fn weir(&self) -> Result<WeirDecoder> {
        WeirDecoder::new("d_weir", &self.weir_schema, MESSAGE, &weir_columns())
    }

    /// All four, in order a, b, c, d.
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(self.before()?),
            Box::new(self.after()),
            Box::new(self.ptars()?),
            Box::new(self.weir()?),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_realistic_and_deterministic() {
        let corpus = generate(20_000, SEED);
        assert_eq!(corpus.total_bytes(), generate(20_000, SEED).total_bytes());
        let mut last = (0, 0);
        let mut symbols = HashSet::new();
        for bytes in corpus.iter() {
            let q = QuoteNbbo::decode(bytes).unwrap();
            let base = q.base.unwrap();
            assert!((18..=21).contains(&base.ticker.len()), "{}", base.ticker);
            assert!(base.ticker.starts_with("O:"));
            assert!(base.timestamp > last.0 && base.sequence_number > last.1);
            last = (base.timestamp, base.sequence_number);
            assert!(q.ask_price > q.bid_price && q.bid_price >= 0.01);
            assert_eq!((q.bid_price * 100.0).round() / 100.0, q.bid_price);
            assert!((1..=500).contains(&q.bid_size) && (1..=500).contains(&q.ask_size));
            assert!((1..=20).contains(&q.bid_exchange) && (1..=20).contains(&q.ask_exchange));
            symbols.insert(base.ticker);
        }
        assert!(symbols.len() > 5_000, "{} symbols", symbols.len());
    }
}
