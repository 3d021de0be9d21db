//! Workload 2: `bench.Wide`, a 50-field message, decoded to all columns and to 5 columns.

use arrow_schema::DataType;
use weir_codec::{default_columns, ColumnSpec, ProtoSchema};

use crate::peers::{PtarsDecoder, WeirDecoder};
use crate::{descriptor_set, proto_dir, Contender, Corpus, Result};
use weir_testdata::Rng;

/// Fully qualified message name.
pub const MESSAGE: &str = "bench.Wide";
/// Messages per run.
pub const MESSAGES: usize = 200_000;
/// The generator's seed.
pub const SEED: u64 = 0x5EED_0050;
/// The five columns of the narrow case, scattered over the message.
pub const FIVE: [&str; 5] = ["event_time", "symbol", "price", "desk", "exposure"];

/// `bench.Route`, as prost-build would generate it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Route {
    #[prost(int64, tag = "1")]
    pub route_id: i64,
    #[prost(double, tag = "2")]
    pub cost: f64,
    #[prost(bool, tag = "3")]
    pub primary: bool,
    #[prost(string, tag = "4")]
    pub gateway: String,
}

/// `bench.Wide`, as prost-build would generate it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Wide {
    #[prost(uint64, tag = "1")]
    pub event_id: u64,
    #[prost(int64, tag = "2")]
    pub event_time: i64,
    #[prost(int64, tag = "3")]
    pub ingest_time: i64,
    #[prost(string, tag = "4")]
    pub source: String,
    #[prost(int64, tag = "5")]
    pub account_id: i64,
    #[prost(uint64, tag = "6")]
    pub user_id: u64,
    #[prost(string, tag = "7")]
    pub session_id: String,
    #[prost(string, tag = "8")]
    pub symbol: String,
    #[prost(string, tag = "9")]
    pub venue: String,
    #[prost(int32, tag = "10")]
    pub side: i32,
    #[prost(int32, tag = "11")]
    pub order_type: i32,
    #[prost(uint32, tag = "12")]
    pub quantity: u32,
    #[prost(uint32, tag = "13")]
    pub filled_quantity: u32,
    #[prost(double, tag = "14")]
    pub price: f64,
    #[prost(double, tag = "15")]
    pub stop_price: f64,
    #[prost(double, tag = "16")]
    pub avg_fill_price: f64,
    #[prost(double, tag = "17")]
    pub notional: f64,
    #[prost(float, tag = "18")]
    pub fee: f32,
    #[prost(float, tag = "19")]
    pub rebate: f32,
    #[prost(bool, tag = "20")]
    pub is_short: bool,
    #[prost(bool, tag = "21")]
    pub is_hidden: bool,
    #[prost(int32, tag = "22")]
    pub time_in_force: i32,
    #[prost(string, tag = "23")]
    pub client_order_id: String,
    #[prost(uint64, tag = "24")]
    pub parent_order_id: u64,
    #[prost(string, tag = "25")]
    pub strategy: String,
    #[prost(string, tag = "26")]
    pub trader: String,
    #[prost(string, tag = "27")]
    pub desk: String,
    #[prost(string, tag = "28")]
    pub region: String,
    #[prost(string, tag = "29")]
    pub currency: String,
    #[prost(sint64, tag = "30")]
    pub sequence: i64,
    #[prost(sint64, tag = "31")]
    pub delta_position: i64,
    #[prost(sint64, tag = "32")]
    pub pnl_change: i64,
    #[prost(int32, tag = "33")]
    pub risk_bucket: i32,
    #[prost(uint32, tag = "34")]
    pub latency_us: u32,
    #[prost(fixed64, tag = "35")]
    pub hash: u64,
    #[prost(fixed64, tag = "36")]
    pub checksum: u64,
    #[prost(fixed64, tag = "37")]
    pub trace_id: u64,
    #[prost(uint32, tag = "38")]
    pub retry_count: u32,
    #[prost(int32, tag = "39")]
    pub priority: i32,
    #[prost(int64, tag = "40")]
    pub ttl_ms: i64,
    #[prost(float, tag = "41")]
    pub leverage: f32,
    #[prost(double, tag = "42")]
    pub margin: f64,
    #[prost(double, tag = "43")]
    pub exposure: f64,
    #[prost(uint64, tag = "44")]
    pub version: u64,
    #[prost(uint64, tag = "45")]
    pub shard: u64,
    #[prost(sint64, tag = "46")]
    pub correction: i64,
    #[prost(int32, tag = "47")]
    pub flags: i32,
    #[prost(message, optional, tag = "48")]
    pub route: Option<Route>,
    #[prost(int64, repeated, tag = "49")]
    pub fill_ids: Vec<i64>,
    #[prost(int64, tag = "50")]
    pub batch_sequence: i64,
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

/// `n` order events with every field set to a non-default value (except the bools, which are
/// false about half the time and then, as proto3 does, absent from the wire).
pub fn generate(n: usize, seed: u64) -> Corpus {
    let mut rng = Rng::new(seed);
    let mut corpus = Corpus::with_capacity(n, 520);
    let mut event_id: u64 = 90_000_000_000_000;
    let mut event_time: i64 = 1_772_461_800_000_000_000; // 2026-03-02T14:30:00Z
    for i in 0..n {
        event_id += rng.range(1, 16);
        event_time += rng.range(1, 50_000) as i64;
        let quantity = rng.range(1, 10_000) as u32;
        let price_cents = rng.range(100, 500_000) as i64;
        let price = price_cents as f64 / 100.0;
        let region = *rng.pick(REGIONS);
        let wide = Wide {
            event_id,
            event_time,
            ingest_time: event_time + rng.range(50_000, 2_000_000) as i64,
            source: rng.pick(SOURCES).to_string(),
            account_id: rng.range(100_000, 150_000) as i64,
            user_id: rng.below(1 << 40) + 1,
            session_id: format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                rng.below(1 << 32),
                rng.below(1 << 16),
                rng.below(1 << 16),
                rng.below(1 << 16),
                rng.below(1 << 48)
            ),
            symbol: rng.pick(SYMBOLS).to_string(),
            venue: rng.pick(VENUES).to_string(),
            side: rng.range(1, 2) as i32,
            order_type: rng.range(1, 4) as i32,
            quantity,
            filled_quantity: rng.range(1, u64::from(quantity)) as u32,
            price,
            stop_price: (price_cents - rng.range(1, 99) as i64).max(1) as f64 / 100.0,
            avg_fill_price: (price_cents + rng.range_i64(-50, 50)).max(1) as f64 / 100.0,
            notional: price * f64::from(quantity),
            fee: rng.range(1, 1_000) as f32 / 100.0,
            rebate: rng.range(1, 300) as f32 / 1_000.0,
            is_short: rng.chance(0.3),
            is_hidden: rng.chance(0.5),
            time_in_force: rng.range(1, 5) as i32,
            client_order_id: format!("CL{:016X}", rng.next_u64()),
            parent_order_id: rng.next_u64() >> 8,
            strategy: rng.pick(STRATEGIES).to_string(),
            trader: format!("trader{:04}", rng.below(2_000)),
            desk: rng.pick(DESKS).to_string(),
            region: region.to_string(),
            currency: rng.pick(CURRENCIES).to_string(),
            sequence: i as i64 + 1,
            delta_position: signed(&mut rng, 10_000),
            pnl_change: signed(&mut rng, 5_000_000),
            risk_bucket: rng.range(1, 10) as i32,
            latency_us: rng.range(1, 5_000) as u32,
            hash: rng.next_u64(),
            checksum: rng.next_u64(),
            trace_id: rng.next_u64(),
            retry_count: rng.range(1, 5) as u32,
            priority: rng.range(1, 9) as i32,
            ttl_ms: rng.range(1_000, 600_000) as i64,
            leverage: rng.range(10, 100) as f32 / 10.0,
            margin: rng.range(1, 10_000_000) as f64 / 100.0,
            exposure: rng.range(1, 1_000_000_000) as f64 / 100.0,
            version: rng.range(1, 1_000_000),
            shard: rng.range(1, 256),
            correction: signed(&mut rng, 1_000),
            flags: rng.range(1, 0xFFFF) as i32,
            route: Some(Route {
                route_id: rng.range(1, 1 << 40) as i64,
                cost: rng.range(1, 100_000) as f64 / 10_000.0,
                primary: rng.chance(0.7),
                gateway: format!("gw-{region}-{:02}", rng.range(1, 16)),
            }),
            fill_ids: (0..rng.range(1, 12))
                .map(|_| rng.range(1 << 39, 1 << 41) as i64)
                .collect(),
            batch_sequence: i as i64 + 1,
        };
        corpus.push(&wide);
    }
    corpus
}

/// The encoded events and the schemas every contender needs.
pub struct WideWorkload {
    /// The encoded messages.
    pub corpus: Corpus,
    /// `wide.proto` compiled by protox, as an encoded `FileDescriptorSet`.
    pub descriptor_set: Vec<u8>,
    /// `wide.proto` loaded by weir.
    pub weir_schema: ProtoSchema,
}

impl WideWorkload {
    /// Generates `messages` events and loads the schema.
    pub fn new(messages: usize) -> Result<Self> {
        Ok(Self {
            corpus: generate(messages, SEED),
            descriptor_set: descriptor_set("wide.proto")?,
            weir_schema: ProtoSchema::from_proto_file(proto_dir().join("wide.proto"), &[])?,
        })
    }

    /// Every top-level field with weir's default mapping (`route` a struct column,
    /// `fill_ids` a list column).
    pub fn all_columns(&self) -> Result<Vec<ColumnSpec>> {
        Ok(default_columns(&self.weir_schema, MESSAGE)?)
    }

    /// The [`FIVE`] columns, with the types the default mapping gives them.
    pub fn five_columns(&self) -> Vec<ColumnSpec> {
        vec![
            ColumnSpec::new(FIVE[0], DataType::Int64),
            ColumnSpec::new(FIVE[1], DataType::Utf8),
            ColumnSpec::new(FIVE[2], DataType::Float64),
            ColumnSpec::new(FIVE[3], DataType::Utf8),
            ColumnSpec::new(FIVE[4], DataType::Float64),
        ]
    }

    /// weir decoding all 50 columns.
    pub fn weir_all(&self) -> Result<WeirDecoder> {
        WeirDecoder::new(
            "weir_all_50",
            &self.weir_schema,
            MESSAGE,
            &self.all_columns()?,
        )
    }

    /// weir decoding 5 columns.
    pub fn weir_five(&self) -> Result<WeirDecoder> {
        WeirDecoder::new("weir_5", &self.weir_schema, MESSAGE, &self.five_columns())
    }

    /// ptars, which always decodes every field.
    pub fn ptars_all(&self) -> Result<PtarsDecoder> {
        PtarsDecoder::new("ptars_all_50", &self.descriptor_set, MESSAGE)
    }

    /// weir (all), weir (5), ptars (all).
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(self.weir_all()?),
            Box::new(self.weir_five()?),
            Box::new(self.ptars_all()?),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::{DescriptorPool, DynamicMessage, Kind};

    #[test]
    fn every_field_but_false_bools_is_set() {
        let pool =
            DescriptorPool::decode(descriptor_set("wide.proto").unwrap().as_slice()).unwrap();
        let desc = pool.get_message_by_name(MESSAGE).unwrap();
        assert_eq!(desc.fields().count(), 50);
        let corpus = generate(2_000, SEED);
        let avg = corpus.avg_message_size();
        assert!((200.0..1_000.0).contains(&avg), "{avg}");
        for bytes in corpus.iter() {
            let message = DynamicMessage::decode(desc.clone(), bytes).unwrap();
            for field in desc.fields() {
                assert!(
                    message.has_field(&field) || field.kind() == Kind::Bool,
                    "{} is not set",
                    field.name()
                );
            }
        }
    }
}
