//! The Avro decoder race: two inputs, three contenders, all reading binary Avro datums (the
//! record alone: no container file, no single-object or registry header in the corpus).
//!
//! * `a_apache_avro`: apache-avro 0.22, a `GenericDatumReader` built once and `read_value` per
//!   datum (what `from_avro_datum` does, which 0.22 deprecates in its favour), then each column's
//!   value appended to a concrete Arrow builder ([`peers::ApacheAvroDecoder`]);
//!   `a_apache_avro_from_datum` calls `apache_avro::from_avro_datum` per datum instead.
//! * `b_arrow_avro`: arrow-avro 59.3's streaming `Decoder`, fed the single-object header and
//!   then the datum ([`peers::ArrowAvroDecoder`]).
//! * `c_weir`: `weir_codec::AvroDecoder` ([`peers::WeirAvroDecoder`]).
//!
//! Inputs: (1) the options quotes (`weir_testdata::STOCKS_AVSC`, `base` a nested record), the
//! generator the protobuf and JSON benchmarks use; (2) a flat record of 50 fields (longs,
//! doubles, strings, booleans), all 50 columns against 5.

pub mod peers;

use std::fmt::Write as _;

use arrow_schema::DataType;
use weir_codec::{avro_default_columns, AvroSchema, ColumnSpec};
use weir_testdata::{QuoteGenerator, Rng, STOCKS_AVSC};

use crate::{Contender, Corpus, Result};
use peers::{ApacheAvroDecoder, ArrowAvroDecoder, ValueRead, WeirAvroDecoder};

// ---------------------------------------------------------------------------------------------
// 1. quotes
// ---------------------------------------------------------------------------------------------

/// Quotes per run (as many as the protobuf and JSON benchmarks).
pub const QUOTE_MESSAGES: usize = 1_000_000;

/// The generator's seed (the protobuf and JSON benchmarks' quotes).
pub const QUOTE_SEED: u64 = weir_testdata::DEFAULT_SEED;

/// The 12 quote columns by dotted path, for weir's flat variant.
pub const QUOTE_PATHS: [(&str, &str); 12] = [
    ("ticker", "base.ticker"),
    ("timestamp", "base.timestamp"),
    ("sequence_number", "base.sequence_number"),
    ("bid_price", "bid_price"),
    ("bid_size", "bid_size"),
    ("bid_exchange", "bid_exchange"),
    ("ask_price", "ask_price"),
    ("ask_size", "ask_size"),
    ("ask_exchange", "ask_exchange"),
    ("conditions", "conditions"),
    ("indicators", "indicators"),
    ("tape", "tape"),
];

/// The quote workload: `stocks.avsc` datums.
pub struct QuoteAvroWorkload {
    /// The datums.
    pub corpus: Corpus,
    /// `stocks.avsc` parsed by weir.
    pub schema: AvroSchema,
}

impl QuoteAvroWorkload {
    /// `messages` quotes of `QuoteGenerator::new(QUOTE_SEED)`, each `encode_avro`d.
    pub fn new(messages: usize) -> Result<Self> {
        let mut generator = QuoteGenerator::new(QUOTE_SEED);
        let mut corpus = Corpus::with_capacity(messages, 64);
        let mut datum = Vec::with_capacity(128);
        for _ in 0..messages {
            datum.clear();
            generator.next_quote().encode_avro(&mut datum);
            corpus.push_bytes(&datum);
        }
        Ok(Self {
            corpus,
            schema: AvroSchema::parse(STOCKS_AVSC)?,
        })
    }

    /// weir with `avro_default_columns`: one column per top-level field, `base` a struct of
    /// its three fields (the shape arrow-avro and apache-avro's `Value` give).
    pub fn weir(&self) -> Result<WeirAvroDecoder> {
        WeirAvroDecoder::new("c_weir", &self.schema, &avro_default_columns(&self.schema)?)
    }

    /// weir with 12 flat columns, the three `base` fields bound through paths.
    pub fn weir_flat(&self) -> Result<WeirAvroDecoder> {
        let default = avro_default_columns(&self.schema)?;
        let base = default
            .iter()
            .find(|c| c.name == "base")
            .ok_or("no base column")?;
        let DataType::Struct(base_fields) = &base.data_type else {
            return Err("base is not a struct column".into());
        };
        let mut columns = Vec::with_capacity(12);
        for (name, path) in QUOTE_PATHS {
            let ty = if let Some(child) = path.strip_prefix("base.") {
                base_fields
                    .iter()
                    .find(|f| f.name() == child)
                    .ok_or("no base field")?
                    .data_type()
                    .clone()
            } else {
                default
                    .iter()
                    .find(|c| c.name == name)
                    .ok_or("no column")?
                    .data_type
                    .clone()
            };
            columns.push(ColumnSpec::new(name, ty).with_path(path));
        }
        WeirAvroDecoder::new("c_weir_flat", &self.schema, &columns)
    }

    /// apache-avro building the columns of weir's default schema.
    pub fn apache(&self, read: ValueRead) -> Result<ApacheAvroDecoder> {
        let name = match read {
            ValueRead::Reader => "a_apache_avro",
            ValueRead::FromAvroDatum => "a_apache_avro_from_datum",
        };
        ApacheAvroDecoder::new(name, STOCKS_AVSC, self.weir()?.schema(), read)
    }

    /// arrow-avro, all fields.
    pub fn arrow_avro(&self) -> Result<ArrowAvroDecoder> {
        ArrowAvroDecoder::new("b_arrow_avro", STOCKS_AVSC, None)
    }

    /// a, a (from_avro_datum), b, c, c (flat), in that order.
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(self.apache(ValueRead::Reader)?),
            Box::new(self.apache(ValueRead::FromAvroDatum)?),
            Box::new(self.arrow_avro()?),
            Box::new(self.weir()?),
            Box::new(self.weir_flat()?),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// 2. a 50-field record
// ---------------------------------------------------------------------------------------------

/// Records per run (as many as the protobuf benchmark's 50-field message).
pub const WIDE_MESSAGES: usize = 200_000;

/// The generator's seed (the protobuf benchmark's 50-field message uses the same).
pub const WIDE_SEED: u64 = 0x5EED_0050;

/// The Avro type of a wide field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `long` (Int64).
    Long,
    /// `double` (Float64).
    Double,
    /// `string` (Utf8).
    Str,
    /// `boolean` (Boolean).
    Bool,
}

/// The 50 fields in writer order: 26 longs, 9 doubles, 11 strings, 4 booleans (the protobuf
/// benchmark's `bench.Wide`, with its nested route and repeated ids flattened to scalars).
pub const WIDE_FIELDS: [(&str, Kind); 50] = [
    ("event_id", Kind::Long),
    ("event_time", Kind::Long),
    ("ingest_time", Kind::Long),
    ("source", Kind::Str),
    ("account_id", Kind::Long),
    ("user_id", Kind::Long),
    ("session_id", Kind::Str),
    ("symbol", Kind::Str),
    ("venue", Kind::Str),
    ("side", Kind::Long),
    ("order_type", Kind::Long),
    ("quantity", Kind::Long),
    ("filled_quantity", Kind::Long),
    ("price", Kind::Double),
    ("stop_price", Kind::Double),
    ("avg_fill_price", Kind::Double),
    ("notional", Kind::Double),
    ("fee", Kind::Double),
    ("rebate", Kind::Double),
    ("is_short", Kind::Bool),
    ("is_hidden", Kind::Bool),
    ("time_in_force", Kind::Long),
    ("client_order_id", Kind::Str),
    ("parent_order_id", Kind::Long),
    ("strategy", Kind::Str),
    ("trader", Kind::Str),
    ("desk", Kind::Str),
    ("region", Kind::Str),
    ("currency", Kind::Str),
    ("sequence", Kind::Long),
    ("delta_position", Kind::Long),
    ("pnl_change", Kind::Long),
    ("risk_bucket", Kind::Long),
    ("latency_us", Kind::Long),
    ("hash", Kind::Long),
    ("checksum", Kind::Long),
    ("trace_id", Kind::Long),
    ("retry_count", Kind::Long),
    ("priority", Kind::Long),
    ("ttl_ms", Kind::Long),
    ("leverage", Kind::Double),
    ("margin", Kind::Double),
    ("exposure", Kind::Double),
    ("version", Kind::Long),
    ("shard", Kind::Long),
    ("correction", Kind::Long),
    ("is_primary", Kind::Bool),
    ("gateway", Kind::Str),
    ("is_odd_lot", Kind::Bool),
    ("batch_sequence", Kind::Long),
];

/// The five columns of the narrow case, scattered over the record (the protobuf benchmark's).
pub const FIVE: [&str; 5] = ["event_time", "symbol", "price", "desk", "exposure"];

/// The wide record's Avro schema.
pub fn wide_avsc() -> String {
    let mut s =
        String::from(r#"{"type": "record", "name": "Wide", "namespace": "bench", "fields": ["#);
    for (i, (name, kind)) in WIDE_FIELDS.iter().enumerate() {
        let t = match kind {
            Kind::Long => "long",
            Kind::Double => "double",
            Kind::Str => "string",
            Kind::Bool => "boolean",
        };
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(s, r#"{sep}{{"name": "{name}", "type": "{t}"}}"#);
    }
    s.push_str("]}");
    s
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_long(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

const SOURCES: &[&str] = &[
    "fix-gateway-ny4-01",
    "fix-gateway-ny4-02",
    "fix-gateway-ld4-01",
    "rest-api",
    "websocket-stream",
    "algo-engine",
];
const SYMBOLS: &[&str] = &[
    "AAPL", "MSFT", "NVDA", "AMZN", "GOOGL", "META", "TSLA", "SPY", "QQQ", "IWM", "F", "T",
    "BRK.B", "JPM", "XOM", "AMD", "NFLX", "COIN",
];
const VENUES: &[&str] = &["XNAS", "XNYS", "ARCX", "BATS", "EDGX", "IEXG", "MEMX"];
const STRATEGIES: &[&str] = &[
    "vwap",
    "twap",
    "pov",
    "iceberg",
    "sniper",
    "liquidity-seeker",
    "dark-sweep",
];
const DESKS: &[&str] = &[
    "equities-ny",
    "equities-ldn",
    "etf-market-making",
    "options-flow",
    "delta-one",
];
const REGIONS: &[&str] = &["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"];
const CURRENCIES: &[&str] = &["USD", "EUR", "GBP", "JPY", "CAD"];

fn signed(rng: &mut Rng, magnitude: u64) -> i64 {
    let v = rng.range(1, magnitude) as i64;
    if rng.chance(0.5) {
        -v
    } else {
        v
    }
}

/// `n` order events of [`WIDE_FIELDS`], encoded field by field in writer order: ids and times
/// of 5 to 9 varint bytes, small counts of 1 to 2, three random 64-bit hashes (10 bytes), prices
/// with two decimals, strings of 1 to 36 bytes.
pub fn generate_wide(n: usize, seed: u64) -> Corpus {
    let mut rng = Rng::new(seed);
    let mut corpus = Corpus::with_capacity(n, 400);
    let mut out = Vec::with_capacity(512);
    let mut event_id: i64 = 90_000_000_000_000;
    let mut event_time: i64 = 1_772_461_800_000_000_000; // 2026-03-02T14:30:00Z
    for i in 0..n {
        out.clear();
        let o = &mut out;
        let r = &mut rng;
        event_id += r.range(1, 16) as i64;
        event_time += r.range(1, 50_000) as i64;
        let quantity = r.range(1, 10_000);
        let price_cents = r.range(100, 500_000) as i64;
        let price = price_cents as f64 / 100.0;
        let region = *r.pick(REGIONS);
        put_long(o, event_id);
        put_long(o, event_time);
        put_long(o, event_time + r.range(50_000, 2_000_000) as i64);
        put_str(o, r.pick::<&str>(SOURCES));
        put_long(o, r.range(100_000, 150_000) as i64);
        put_long(o, (r.below(1 << 40) + 1) as i64);
        let session = format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            r.below(1 << 32),
            r.below(1 << 16),
            r.below(1 << 16),
            r.below(1 << 16),
            r.below(1 << 48)
        );
        put_str(o, &session);
        put_str(o, r.pick::<&str>(SYMBOLS));
        put_str(o, r.pick::<&str>(VENUES));
        put_long(o, r.range(1, 2) as i64);
        put_long(o, r.range(1, 4) as i64);
        put_long(o, quantity as i64);
        put_long(o, r.range(1, quantity) as i64);
        o.extend_from_slice(&price.to_le_bytes());
        let stop = (price_cents - r.range(1, 99) as i64).max(1) as f64 / 100.0;
        o.extend_from_slice(&stop.to_le_bytes());
        let avg = (price_cents + r.range_i64(-50, 50)).max(1) as f64 / 100.0;
        o.extend_from_slice(&avg.to_le_bytes());
        o.extend_from_slice(&(price * quantity as f64).to_le_bytes());
        o.extend_from_slice(&(r.range(1, 1_000) as f64 / 100.0).to_le_bytes());
        o.extend_from_slice(&(r.range(1, 300) as f64 / 1_000.0).to_le_bytes());
        o.push(u8::from(r.chance(0.3)));
        o.push(u8::from(r.chance(0.5)));
        put_long(o, r.range(1, 5) as i64);
        put_str(o, &format!("CL{:016X}", r.next_u64()));
        put_long(o, (r.next_u64() >> 8) as i64);
        put_str(o, r.pick::<&str>(STRATEGIES));
        put_str(o, &format!("trader{:04}", r.below(2_000)));
        put_str(o, r.pick::<&str>(DESKS));
        put_str(o, region);
        put_str(o, r.pick::<&str>(CURRENCIES));
        put_long(o, i as i64 + 1);
        put_long(o, signed(r, 10_000));
        put_long(o, signed(r, 5_000_000));
        put_long(o, r.range(1, 10) as i64);
        put_long(o, r.range(1, 5_000) as i64);
        put_long(o, r.next_u64() as i64);
        put_long(o, r.next_u64() as i64);
        put_long(o, r.next_u64() as i64);
        put_long(o, r.range(1, 5) as i64);
        put_long(o, r.range(1, 9) as i64);
        put_long(o, r.range(1_000, 600_000) as i64);
        o.extend_from_slice(&(r.range(10, 100) as f64 / 10.0).to_le_bytes());
        o.extend_from_slice(&(r.range(1, 10_000_000) as f64 / 100.0).to_le_bytes());
        o.extend_from_slice(&(r.range(1, 1_000_000_000) as f64 / 100.0).to_le_bytes());
        put_long(o, r.range(1, 1_000_000) as i64);
        put_long(o, r.range(1, 256) as i64);
        put_long(o, signed(r, 1_000));
        o.push(u8::from(r.chance(0.7)));
        put_str(o, &format!("gw-{region}-{:02}", r.range(1, 16)));
        o.push(u8::from(!quantity.is_multiple_of(100)));
        put_long(o, i as i64 + 1);
        corpus.push_bytes(&out);
    }
    corpus
}

/// The 50-field workload.
pub struct WideAvroWorkload {
    /// The datums.
    pub corpus: Corpus,
    /// The schema's text.
    pub avsc: String,
    /// The schema parsed by weir.
    pub schema: AvroSchema,
}

impl WideAvroWorkload {
    /// Generates `messages` records.
    pub fn new(messages: usize) -> Result<Self> {
        let avsc = wide_avsc();
        Ok(Self {
            corpus: generate_wide(messages, WIDE_SEED),
            schema: AvroSchema::parse(&avsc)?,
            avsc,
        })
    }

    /// Every field (`avro_default_columns`).
    pub fn all_columns(&self) -> Result<Vec<ColumnSpec>> {
        Ok(avro_default_columns(&self.schema)?)
    }

    /// The [`FIVE`] columns, with their default types.
    pub fn five_columns(&self) -> Result<Vec<ColumnSpec>> {
        let all = self.all_columns()?;
        FIVE.iter()
            .map(|n| {
                all.iter()
                    .find(|c| c.name == *n)
                    .cloned()
                    .ok_or_else(|| format!("no field {n}").into())
            })
            .collect()
    }

    /// weir, all 50 columns.
    pub fn weir_all(&self) -> Result<WeirAvroDecoder> {
        WeirAvroDecoder::new("weir_all_50", &self.schema, &self.all_columns()?)
    }

    /// weir, 5 columns.
    pub fn weir_five(&self) -> Result<WeirAvroDecoder> {
        WeirAvroDecoder::new("weir_5", &self.schema, &self.five_columns()?)
    }

    /// arrow-avro, all 50.
    pub fn arrow_all(&self) -> Result<ArrowAvroDecoder> {
        ArrowAvroDecoder::new("arrow_avro_all_50", &self.avsc, None)
    }

    /// arrow-avro projected to the [`FIVE`] (top-level field positions, in that order).
    pub fn arrow_five(&self) -> Result<ArrowAvroDecoder> {
        let projection = FIVE
            .iter()
            .map(|n| {
                WIDE_FIELDS
                    .iter()
                    .position(|(f, _)| f == n)
                    .ok_or_else(|| format!("no field {n}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        ArrowAvroDecoder::new("arrow_avro_5", &self.avsc, Some(projection))
    }

    /// apache-avro, all 50 columns (`Value` per datum, then builders).
    pub fn apache_all(&self) -> Result<ApacheAvroDecoder> {
        ApacheAvroDecoder::new(
            "apache_avro_all_50",
            &self.avsc,
            self.weir_all()?.schema(),
            ValueRead::Reader,
        )
    }

    /// apache-avro, 5 columns: the whole datum still becomes a `Value`; 5 are converted.
    pub fn apache_five(&self) -> Result<ApacheAvroDecoder> {
        ApacheAvroDecoder::new(
            "apache_avro_5",
            &self.avsc,
            self.weir_five()?.schema(),
            ValueRead::Reader,
        )
    }

    /// Every contender on this input.
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(self.apache_all()?),
            Box::new(self.apache_five()?),
            Box::new(self.arrow_all()?),
            Box::new(self.arrow_five()?),
            Box::new(self.weir_all()?),
            Box::new(self.weir_five()?),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::same_batches;

    #[test]
    fn the_three_readers_agree_on_a_few_records() {
        let w = WideAvroWorkload::new(3_000).unwrap();
        let avg = w.corpus.avg_message_size();
        assert!((250.0..600.0).contains(&avg), "{avg}");
        let reference = w.apache_all().unwrap().run_collect(&w.corpus).unwrap();
        same_batches(
            &reference,
            &w.weir_all().unwrap().run_collect(&w.corpus).unwrap(),
        )
        .unwrap();
        same_batches(
            &reference,
            &w.arrow_all().unwrap().run_collect(&w.corpus).unwrap(),
        )
        .unwrap();
        let q = QuoteAvroWorkload::new(3_000).unwrap();
        let reference = q
            .apache(ValueRead::Reader)
            .unwrap()
            .run_collect(&q.corpus)
            .unwrap();
        same_batches(
            &reference,
            &q.arrow_avro().unwrap().run_collect(&q.corpus).unwrap(),
        )
        .unwrap();
    }
}
