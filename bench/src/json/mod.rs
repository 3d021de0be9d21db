//! The JSON decoder race: three inputs, four contenders.
//!
//! * `a_serde_value`: `serde_json::from_slice::<Value>`, then a walk of each column's path into
//!   `Box<dyn ArrayBuilder>`s (the parse-into-a-tree-then-convert pattern, which parses twice) ([`peers::ValueWalkDecoder`]).
//! * `b_serde_derive`: serde derive into a typed struct (strings borrowed when unescaped), then
//!   concrete builders, hand-written per document type ([`derive`]).
//! * `c_arrow_json`: arrow-json 59.3's `ReaderBuilder::build_decoder`, the state of the art for
//!   JSON -> Arrow in Rust; nested paths are read as nested struct columns
//!   ([`peers::ArrowJsonDecoder`]).
//! * `d_weir`: `weir_codec::JsonDecoder` ([`peers::WeirJsonDecoder`]).
//!
//! Inputs: (1) the protobuf benchmark's quotes (the same generator and seed) as compact JSON
//! objects; (2) a ~2 KB order event with nested objects and arrays; (3) a 50-key object, all 50
//! keys against 5.

pub mod before;
pub mod derive;
pub mod peers;

use std::fmt::Write as _;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use prost::Message as _;
use weir_codec::{ColumnSpec, JsonDecoderOptions};

use crate::quote::{self, QuoteNbbo};
use crate::{Contender, Corpus, Result};
use derive::{OrderDeriveDecoder, QuoteDeriveDecoder};
use peers::{ArrowJsonDecoder, ValueWalkDecoder, WeirJsonDecoder};
use weir_testdata::Rng;

/// A JSON string literal (escaped as serde_json escapes it).
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// 1. quotes
// ---------------------------------------------------------------------------------------------

/// Quote messages per run (as many as the protobuf benchmark).
pub const QUOTE_MESSAGES: usize = quote::MESSAGES;

/// The quote as compact JSON, field names as in `stocks.proto`.
fn quote_json(q: &QuoteNbbo, out: &mut String) {
    out.clear();
    out.push('{');
    if let Some(b) = &q.base {
        let _ = write!(
            out,
            r#""base":{{"ticker":{},"timestamp":{},"sequence_number":{}}},"#,
            js(&b.ticker),
            b.timestamp,
            b.sequence_number
        );
    }
    let _ = write!(
        out,
        r#""bid_price":{:?},"bid_size":{},"bid_exchange":{},"ask_price":{:?},"ask_size":{},"ask_exchange":{},"conditions":{},"indicators":{},"tape":{}}}"#,
        q.bid_price,
        q.bid_size,
        q.bid_exchange,
        q.ask_price,
        q.ask_size,
        q.ask_exchange,
        q.conditions,
        q.indicators,
        q.tape
    );
}

/// The quote workload: the protobuf benchmark's quotes as JSON, 12 columns.
pub struct QuoteJsonWorkload {
    /// The JSON messages.
    pub corpus: Corpus,
}

/// Dotted paths of the 12 quote columns, in [`quote::arrow_schema`] order.
pub const QUOTE_PATHS: [&str; 12] = [
    "base.ticker",
    "base.timestamp",
    "base.sequence_number",
    "bid_price",
    "bid_size",
    "bid_exchange",
    "ask_price",
    "ask_size",
    "ask_exchange",
    "conditions",
    "indicators",
    "tape",
];

impl QuoteJsonWorkload {
    /// Generates `messages` quotes with the protobuf benchmark's generator and seed, and writes
    /// each as JSON.
    pub fn new(messages: usize) -> Result<Self> {
        let proto = quote::generate(messages, quote::SEED);
        let mut corpus = Corpus::with_capacity(messages, 240);
        let mut text = String::with_capacity(256);
        for bytes in proto.iter() {
            let q = QuoteNbbo::decode(bytes)?;
            quote_json(&q, &mut text);
            corpus.push_bytes(text.as_bytes());
        }
        Ok(Self { corpus })
    }

    /// The schema arrow-json reads: `base` as a struct.
    pub fn nested_schema() -> SchemaRef {
        let flat = quote::arrow_schema();
        let base = DataType::Struct(Fields::from(vec![
            flat.field(0).clone(),
            flat.field(1).clone(),
            flat.field(2).clone(),
        ]));
        let mut fields = vec![Field::new("base", base, true)];
        fields.extend(flat.fields().iter().skip(3).map(|f| f.as_ref().clone()));
        Arc::new(Schema::new(fields))
    }

    /// a, b, c, d in order.
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(ValueWalkDecoder::new(
                "a_serde_value",
                quote::arrow_schema(),
                &QUOTE_PATHS,
            )),
            Box::new(QuoteDeriveDecoder::new(quote::arrow_schema())),
            Box::new(ArrowJsonDecoder::new(
                "c_arrow_json",
                Self::nested_schema(),
            )?),
            Box::new(WeirJsonDecoder::new(
                "d_weir",
                &quote::weir_columns(),
                JsonDecoderOptions::default(),
            )?),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// 2. order events (~2 KB, nested)
// ---------------------------------------------------------------------------------------------

/// Order events per run.
pub const ORDER_MESSAGES: usize = 100_000;

const CITIES: &[(&str, &str)] = &[
    ("Berlin", "DE"),
    ("M\u{fc}nchen", "DE"),
    ("Paris", "FR"),
    ("Lyon", "FR"),
    ("Madrid", "ES"),
    ("Milano", "IT"),
    ("Amsterdam", "NL"),
    ("Krak\u{f3}w", "PL"),
    ("Z\u{fc}rich", "CH"),
    ("Wien", "AT"),
];
const PRODUCTS: &[&str] = &[
    "Wireless noise-cancelling headphones",
    "Stainless steel water bottle 750ml",
    "Organic cotton t-shirt",
    "USB-C charging cable (2m, braided)",
    "Ergonomic office chair",
    "Mechanical keyboard \"TKL\" edition",
    "Ceramic pour-over coffee dripper",
    "Running shoes, size 42",
    "LED desk lamp with dimmer",
    "Hardcover notebook, dotted",
];
const TAGS: &[&str] = &[
    "vip",
    "newsletter",
    "mobile",
    "returning",
    "b2b",
    "promo",
    "eu",
];

fn order_json(rng: &mut Rng, i: usize, out: &mut String) {
    out.clear();
    let ts = 1_772_461_800_000i64 + i as i64 * 37;
    let (city, country) = *rng.pick(CITIES);
    let customer = 100_000 + rng.below(900_000);
    let items = 4 + rng.below(5) as usize;
    let _ = write!(
        out,
        r#"{{"event_id":"{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}","event_type":"order_created","version":3,"ts":{ts},"#,
        rng.next_u64() as u32,
        rng.below(1 << 16),
        rng.below(1 << 12),
        rng.below(1 << 12),
        rng.next_u64() & 0xffff_ffff_ffff
    );
    let _ = write!(
        out,
        r#""source":{{"app":"web-shop","region":"eu-west-1","ip":"10.{}.{}.{}","user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"}},"#,
        rng.below(256),
        rng.below(256),
        rng.below(256)
    );
    let _ = write!(
        out,
        r#""session":{{"id":"s-{:016x}","started_at":"2026-03-02T14:{:02}:{:02}.{:03}Z","referrer":"https://www.example.com/search?q=deals&page={}"}},"#,
        rng.next_u64(),
        rng.below(60),
        rng.below(60),
        rng.below(1000),
        rng.below(20)
    );
    let ntags = rng.below(4) as usize;
    let tags: Vec<String> = (0..ntags)
        .map(|_| {
            let tag = *rng.pick(TAGS);
            js(tag)
        })
        .collect();
    let _ = write!(
        out,
        r#""customer":{{"id":{customer},"email":"user{customer}@example.com","name":{},"tier":"{}","created_at":"2024-0{}-1{}T09:00:00Z","address":{{"street":"Hauptstra\u00dfe {}","city":{},"zip":"{:05}","country":"{country}","geo":{{"lat":{:.6},"lon":{:.6}}}}},"tags":[{}],"preferences":{{"newsletter":{},"language":"de","currency":"EUR"}}}},"#,
        js(&format!("Customer {customer}")),
        ["bronze", "silver", "gold"][rng.below(3) as usize],
        1 + rng.below(9),
        rng.below(10),
        1 + rng.below(200),
        js(city),
        rng.below(100_000),
        45.0 + rng.unit() * 10.0,
        2.0 + rng.unit() * 15.0,
        tags.join(","),
        rng.chance(0.5)
    );
    out.push_str(r#""items":["#);
    let mut total = 0.0;
    for k in 0..items {
        if k > 0 {
            out.push(',');
        }
        let price = (100 + rng.below(20_000)) as f64 / 100.0;
        let qty = 1 + rng.below(3);
        total += price * qty as f64;
        // Drawn in this order (sku, then product) so the corpus stays what was measured.
        let sku = rng.below(1_000_000);
        let product = *rng.pick(PRODUCTS);
        let _ = write!(
            out,
            r#"{{"sku":"SKU-{sku:06}","name":{},"qty":{qty},"price":{price:?},"discount":{:?},"category":"cat-{}","attrs":{{"color":"{}","size":"{}","material":"recycled"}}}}"#,
            js(product),
            (rng.below(30) as f64) / 100.0,
            rng.below(40),
            ["red", "blue", "black", "white"][rng.below(4) as usize],
            ["S", "M", "L", "XL"][rng.below(4) as usize]
        );
    }
    out.push_str("],");
    let total = (total * 100.0).round() / 100.0;
    let _ = write!(
        out,
        r#""payment":{{"method":"card","amount":{total:?},"currency":"EUR","card":{{"brand":"visa","last4":"{:04}","exp":"{:02}/{}"}},"installments":1}},"#,
        rng.below(10_000),
        1 + rng.below(12),
        27 + rng.below(5)
    );
    let _ = write!(
        out,
        r#""shipping":{{"carrier":"DHL","service":"express","cost":4.99,"eta":"2026-03-0{}T18:00:00+01:00","address":{{"city":{},"country":"{country}"}}}},"#,
        3 + rng.below(5),
        js(city)
    );
    let _ = write!(
        out,
        r#""notes":{},"metrics":[{}],"flags":{{"gift":{},"priority":false,"fraud_check":"passed"}}}}"#,
        js(&format!(
            "Bitte \"vorsichtig\" liefern \u{2013} Hinterhof, 2. Stock\nTel: +49 30 {:07}",
            rng.below(10_000_000)
        )),
        (0..8)
            .map(|_| format!("{:?}", (rng.below(100_000) as f64) / 1000.0))
            .collect::<Vec<_>>()
            .join(","),
        rng.chance(0.1)
    );
}

/// Names of the 11 order columns.
pub const ORDER_NAMES: [&str; 11] = [
    "event_id",
    "event_type",
    "ts",
    "customer_id",
    "country",
    "tags",
    "items",
    "amount",
    "currency",
    "notes",
    "metrics",
];

/// Their dotted paths.
pub const ORDER_PATHS: [&str; 11] = [
    "event_id",
    "event_type",
    "ts",
    "customer.id",
    "customer.address.country",
    "customer.tags",
    "items",
    "payment.amount",
    "payment.currency",
    "notes",
    "metrics",
];

/// The order workload: ~2 KB events, 11 columns (3 through nested paths, 3 lists, one a list of
/// structs).
pub struct OrderWorkload {
    /// The JSON messages.
    pub corpus: Corpus,
}

fn utf8_list() -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
}

impl OrderWorkload {
    /// Generates `messages` events with a fixed seed.
    pub fn new(messages: usize) -> Self {
        let mut rng = Rng::new(0x5EED_0003);
        let mut corpus = Corpus::with_capacity(messages, 2100);
        let mut text = String::with_capacity(4096);
        for i in 0..messages {
            order_json(&mut rng, i, &mut text);
            corpus.push_bytes(text.as_bytes());
        }
        Self { corpus }
    }

    /// The struct fields of one item.
    pub fn item_fields() -> Fields {
        Fields::from(vec![
            Field::new("sku", DataType::Utf8, true),
            Field::new("qty", DataType::Int64, true),
            Field::new("price", DataType::Float64, true),
        ])
    }

    fn types() -> Vec<DataType> {
        vec![
            DataType::Utf8,
            DataType::Utf8,
            DataType::Timestamp(TimeUnit::Millisecond, None),
            DataType::Int64,
            DataType::Utf8,
            utf8_list(),
            DataType::List(Arc::new(Field::new(
                "item",
                DataType::Struct(Self::item_fields()),
                true,
            ))),
            DataType::Float64,
            DataType::Utf8,
            DataType::Utf8,
            DataType::List(Arc::new(Field::new("item", DataType::Float64, true))),
        ]
    }

    /// The flat schema of a, b and d.
    pub fn schema() -> SchemaRef {
        Arc::new(Schema::new(
            ORDER_NAMES
                .iter()
                .zip(Self::types())
                .map(|(n, t)| Field::new(*n, t, true))
                .collect::<Vec<_>>(),
        ))
    }

    /// The nested schema arrow-json reads.
    pub fn nested_schema() -> SchemaRef {
        let t = Self::types();
        let customer = DataType::Struct(Fields::from(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(
                "address",
                DataType::Struct(Fields::from(vec![Field::new(
                    "country",
                    DataType::Utf8,
                    true,
                )])),
                true,
            ),
            Field::new("tags", utf8_list(), true),
        ]));
        let payment = DataType::Struct(Fields::from(vec![
            Field::new("amount", DataType::Float64, true),
            Field::new("currency", DataType::Utf8, true),
        ]));
        Arc::new(Schema::new(vec![
            Field::new("event_id", t[0].clone(), true),
            Field::new("event_type", t[1].clone(), true),
            Field::new("ts", t[2].clone(), true),
            Field::new("customer", customer, true),
            Field::new("items", t[6].clone(), true),
            Field::new("payment", payment, true),
            Field::new("notes", t[9].clone(), true),
            Field::new("metrics", t[10].clone(), true),
        ]))
    }

    /// weir's columns: the flat schema with paths.
    pub fn weir_columns() -> Vec<ColumnSpec> {
        ORDER_NAMES
            .iter()
            .zip(ORDER_PATHS)
            .zip(Self::types())
            .map(|((n, p), t)| ColumnSpec::new(*n, t).with_path(p))
            .collect()
    }

    /// a, b, c, d in order.
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(ValueWalkDecoder::new(
                "a_serde_value",
                Self::schema(),
                &ORDER_PATHS,
            )),
            Box::new(OrderDeriveDecoder::new(Self::schema(), Self::item_fields())),
            Box::new(ArrowJsonDecoder::new(
                "c_arrow_json",
                Self::nested_schema(),
            )?),
            Box::new(WeirJsonDecoder::new(
                "d_weir",
                &Self::weir_columns(),
                JsonDecoderOptions::default(),
            )?),
        ])
    }
}

// ---------------------------------------------------------------------------------------------
// 3. 50 keys, 5 requested
// ---------------------------------------------------------------------------------------------

/// Wide messages per run.
pub const WIDE_MESSAGES: usize = 200_000;

const WORDS: &[&str] = &[
    "account", "balance", "region", "created", "status", "priority", "score", "label", "owner",
    "counter",
];

/// The 50 keys.
pub fn wide_keys() -> Vec<String> {
    (0..50)
        .map(|i| {
            format!(
                "{}_{}_{i:02}",
                WORDS[i % WORDS.len()],
                ["id", "value", "name", "flag", "ref"][i / 10]
            )
        })
        .collect()
}

/// The type of key `i`: ints, floats, strings, bools, small ints, short strings, RFC 3339
/// timestamps in turn.
fn wide_type(i: usize) -> DataType {
    match i % 7 {
        0 | 4 => DataType::Int64,
        1 => DataType::Float64,
        2 | 5 => DataType::Utf8,
        3 => DataType::Boolean,
        _ => DataType::Timestamp(TimeUnit::Millisecond, None),
    }
}

/// The 5 requested keys: one of each kind, scattered.
pub const WIDE_FIVE: [usize; 5] = [3, 14, 22, 34, 44];

fn wide_json(rng: &mut Rng, keys: &[String], out: &mut String) {
    out.clear();
    out.push('{');
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "\"{k}\":");
        match i % 7 {
            0 => {
                let _ = write!(out, "{}", rng.next_u64() >> 20);
            }
            1 => {
                let _ = write!(out, "{:?}", (rng.below(10_000_000) as f64) / 1000.0);
            }
            2 => {
                let n = 10 + rng.below(20) as usize;
                let s: String = (0..n)
                    .map(|_| (b'a' + rng.below(26) as u8) as char)
                    .collect();
                let _ = write!(out, "\"{s}\"");
            }
            3 => out.push_str(if rng.chance(0.5) { "true" } else { "false" }),
            4 => {
                let _ = write!(out, "{}", rng.below(1000));
            }
            5 => {
                let _ = write!(
                    out,
                    "\"{}\"",
                    ["ok", "pending", "failed", "retry"][rng.below(4) as usize]
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "\"2026-03-02T{:02}:{:02}:{:02}.{:03}Z\"",
                    rng.below(24),
                    rng.below(60),
                    rng.below(60),
                    rng.below(1000)
                );
            }
        }
    }
    out.push('}');
}

/// The wide workload: 50 keys, decoded all or 5.
pub struct WideJsonWorkload {
    /// The JSON messages.
    pub corpus: Corpus,
    keys: Vec<String>,
}

impl WideJsonWorkload {
    /// Generates `messages` objects with a fixed seed.
    pub fn new(messages: usize) -> Self {
        let keys = wide_keys();
        let mut rng = Rng::new(0x5EED_0050);
        let mut corpus = Corpus::with_capacity(messages, 1400);
        let mut text = String::with_capacity(2048);
        for _ in 0..messages {
            wide_json(&mut rng, &keys, &mut text);
            corpus.push_bytes(text.as_bytes());
        }
        Self { corpus, keys }
    }

    fn pick(&self, which: &[usize]) -> (Vec<ColumnSpec>, SchemaRef) {
        let cols: Vec<ColumnSpec> = which
            .iter()
            .map(|&i| ColumnSpec::new(&self.keys[i], wide_type(i)))
            .collect();
        let schema = Arc::new(Schema::new(
            cols.iter()
                .map(|c| Field::new(&c.name, c.data_type.clone(), true))
                .collect::<Vec<_>>(),
        ));
        (cols, schema)
    }

    /// weir with all 50 keys.
    pub fn weir_all(&self) -> Result<WeirJsonDecoder> {
        let all: Vec<usize> = (0..50).collect();
        WeirJsonDecoder::new(
            "weir_all_50",
            &self.pick(&all).0,
            JsonDecoderOptions::default(),
        )
    }

    /// weir with 5 keys.
    pub fn weir_five(&self) -> Result<WeirJsonDecoder> {
        WeirJsonDecoder::new(
            "weir_5",
            &self.pick(&WIDE_FIVE).0,
            JsonDecoderOptions::default(),
        )
    }

    /// weir with the last key only: 49 pairs skipped in one run, the skip loop's floor.
    pub fn weir_last(&self) -> Result<WeirJsonDecoder> {
        WeirJsonDecoder::new(
            "weir_1",
            &self.pick(&[self.keys.len() - 1]).0,
            JsonDecoderOptions::default(),
        )
    }

    /// arrow-json with all 50 keys.
    pub fn arrow_all(&self) -> Result<ArrowJsonDecoder> {
        let all: Vec<usize> = (0..50).collect();
        ArrowJsonDecoder::new("arrow_json_all_50", self.pick(&all).1)
    }

    /// arrow-json with 5 keys.
    pub fn arrow_five(&self) -> Result<ArrowJsonDecoder> {
        ArrowJsonDecoder::new("arrow_json_5", self.pick(&WIDE_FIVE).1)
    }

    /// weir 50, weir 5, arrow-json 50, arrow-json 5.
    pub fn contenders(&self) -> Result<Vec<Box<dyn Contender>>> {
        Ok(vec![
            Box::new(self.weir_all()?),
            Box::new(self.weir_five()?),
            Box::new(self.arrow_all()?),
            Box::new(self.arrow_five()?),
        ])
    }
}
