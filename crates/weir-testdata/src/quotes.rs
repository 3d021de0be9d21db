//! The options-quotes workload: synthetic `stocks.QuoteNBBO` messages for 10,000 OPRA option
//! symbols, half the traffic on the 500 busiest, two-decimal prices with the ask above the bid,
//! sizes 1..=500. The same seed always gives the same bytes.

use std::io::{self, Write};

use crate::rng::Rng;
use weir_codec::framing::{put_varint, Framing};
use weir_codec::ContainerCodec;

/// The schema of the quotes (`stocks.proto`).
pub const STOCKS_PROTO: &str = include_str!("stocks.proto");

/// The Avro schema of the quotes (`stocks.avsc`): the same fields, `base` a nested record.
pub const STOCKS_AVSC: &str = include_str!("stocks.avsc");

/// The full name of the quote message.
pub const QUOTE_MESSAGE: &str = "stocks.QuoteNBBO";

/// The event time the quotes begin at: 2026-03-02T14:30:00Z, in epoch nanoseconds.
pub const DEFAULT_START: i64 = 1_772_461_800_000_000_000;

/// The default largest step of event time between two quotes, in nanoseconds.
pub const DEFAULT_MAX_GAP: u64 = 2_000;

/// Distinct option symbols.
pub const TICKERS: usize = 10_000;

/// The seed used when none is given.
pub const DEFAULT_SEED: u64 = 0x5EED_0002;

/// How generated quotes are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuoteFormat {
    /// `stocks.QuoteNBBO` protobuf bytes.
    Protobuf,
    /// A JSON object with the same fields (`base` nested).
    Json,
    /// Binary Avro of `stocks.avsc` (the datum alone).
    Avro,
}

/// One quote.
#[derive(Debug, Clone, PartialEq)]
pub struct Quote<'a> {
    /// The OPRA symbol.
    pub ticker: &'a str,
    /// Epoch nanoseconds.
    pub timestamp: i64,
    /// The feed's sequence number.
    pub sequence_number: i64,
    /// Bid price in dollars.
    pub bid_price: f64,
    /// Bid size in contracts.
    pub bid_size: u32,
    /// Bid exchange id.
    pub bid_exchange: u32,
    /// Ask price in dollars.
    pub ask_price: f64,
    /// Ask size in contracts.
    pub ask_size: u32,
    /// Ask exchange id.
    pub ask_exchange: u32,
    /// Condition code.
    pub conditions: i32,
    /// Indicator code.
    pub indicators: i32,
    /// Tape (1..=3).
    pub tape: u32,
}

/// Generates quotes; see the module docs for their shape.
#[derive(Debug, Clone)]
pub struct QuoteGenerator {
    rng: Rng,
    tickers: Vec<String>,
    mids: Vec<i64>,
    timestamp: i64,
    /// The largest step of event time from one quote to the next, in nanoseconds.
    max_gap: u64,
    sequence_number: i64,
    /// The share of quotes that repeat an earlier one (see [`QuoteGenerator::with_duplicates`]).
    duplicates: f64,
    /// The last quotes sent, for repeats: (ticker index, the quote with an empty ticker).
    recent: Vec<(usize, Quote<'static>)>,
    /// The ticker index of the last quote.
    last: usize,
    /// How an Avro container file's blocks are compressed.
    container_codec: ContainerCodec,
}

/// Quotes kept for repeats: a repeat is one of the last this many quotes.
const RECENT: usize = 4096;

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

const EXPIRIES: &[&str] = &[
    "260306", "260313", "260320", "260327", "260402", "260410", "260417", "260515", "260618",
    "260717", "260821", "260918", "261016", "261120", "261218", "270115",
];

impl QuoteGenerator {
    /// A generator whose whole output is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut seen = std::collections::HashSet::with_capacity(TICKERS);
        let mut tickers = Vec::with_capacity(TICKERS);
        while tickers.len() < TICKERS {
            let (underlying, spot) = UNDERLYINGS[rng.below(UNDERLYINGS.len() as u64) as usize];
            let expiry = EXPIRIES[rng.below(EXPIRIES.len() as u64) as usize];
            let right = if rng.unit() < 0.5 { 'C' } else { 'P' };
            // Strikes within +-30% of spot on a grid that depends on the price.
            let step: u64 = match spot {
                0..=30 => 500,
                31..=300 => 1_000,
                301..=2_000 => 5_000,
                _ => 10_000,
            };
            let (lo, hi) = (u64::from(spot) * 700 / step, u64::from(spot) * 1_300 / step);
            let strike = (lo + rng.below(hi - lo + 1)).max(1) * step;
            let symbol = format!("O:{underlying}{expiry}{right}{strike:08}");
            if seen.insert(symbol.clone()) {
                tickers.push(symbol);
            }
        }
        // Per-symbol mid price in cents, log-uniform from 5 cents to $80.
        let mids = (0..TICKERS)
            .map(|_| (5.0 * 1_600f64.powf(rng.unit())) as i64)
            .collect();
        Self {
            rng,
            tickers,
            mids,
            timestamp: DEFAULT_START,
            max_gap: DEFAULT_MAX_GAP,
            sequence_number: 1_250_000_000,
            duplicates: 0.0,
            recent: Vec::new(),
            last: 0,
            container_codec: ContainerCodec::Null,
        }
    }

    /// Compresses the blocks of an Avro container file (`Framing::AvroContainer`) with `codec`
    /// (default: none).
    pub fn with_container_codec(mut self, codec: ContainerCodec) -> Self {
        self.container_codec = codec;
        self
    }

    /// Sets the event time: the first quote comes just after `start` (epoch nanoseconds), and each
    /// later one from 1 to `max_gap` nanoseconds after the one before (a uniform draw). The
    /// default is 2026-03-02T14:30:00Z and 2,000 ns (about a million quotes a second).
    pub fn with_event_time(mut self, start: i64, max_gap: u64) -> Self {
        self.timestamp = start;
        self.max_gap = max_gap.max(1);
        self
    }

    /// Makes about `share` (0 to 1) of the quotes exact repeats of one of the last few thousand
    /// (the same bytes, so the same `(ticker, sequence_number)`), as a producer's retries
    /// would. The rest are new quotes with new sequence numbers.
    pub fn with_duplicates(mut self, share: f64) -> Self {
        self.duplicates = share.clamp(0.0, 1.0);
        self
    }

    /// The next quote, or a repeat of a recent one (see [`QuoteGenerator::with_duplicates`]).
    pub fn next_or_repeat(&mut self) -> Quote<'_> {
        if self.duplicates > 0.0 && !self.recent.is_empty() && self.rng.unit() < self.duplicates {
            let i = self.rng.below(self.recent.len() as u64) as usize;
            let (t, q) = &self.recent[i];
            return Quote {
                ticker: &self.tickers[*t],
                ..q.clone()
            };
        }
        let q = self.next_quote();
        let kept = Quote { ticker: "", ..q };
        if self.duplicates > 0.0 {
            let entry = (self.last, kept.clone());
            if self.recent.len() < RECENT {
                self.recent.push(entry);
            } else {
                self.recent[(self.sequence_number as usize) % RECENT] = entry;
            }
        }
        Quote {
            ticker: &self.tickers[self.last],
            ..kept
        }
    }

    /// The next quote.
    pub fn next_quote(&mut self) -> Quote<'_> {
        let rng = &mut self.rng;
        self.sequence_number += 1;
        let t = if rng.unit() < 0.5 {
            rng.below(500)
        } else {
            rng.below(TICKERS as u64)
        } as usize;
        self.last = t;
        self.timestamp += 1 + rng.below(self.max_gap) as i64;
        let mid = &mut self.mids[t];
        *mid = (*mid + rng.below(7) as i64 - 3).max(2);
        let spread = 1 + rng.below((*mid as u64 / 20).clamp(1, 50)) as i64;
        let bid = (*mid - spread / 2).max(1);
        let ask = bid + spread;
        Quote {
            ticker: &self.tickers[t],
            timestamp: self.timestamp,
            sequence_number: self.sequence_number,
            bid_price: bid as f64 / 100.0,
            bid_size: 1 + rng.below(500) as u32,
            bid_exchange: 1 + rng.below(20) as u32,
            ask_price: ask as f64 / 100.0,
            ask_size: 1 + rng.below(500) as u32,
            ask_exchange: 1 + rng.below(20) as u32,
            conditions: if rng.unit() < 0.8 {
                0
            } else {
                1 + rng.below(60) as i32
            },
            indicators: if rng.unit() < 0.9 {
                0
            } else {
                1 + rng.below(10) as i32
            },
            tape: 1 + rng.below(3) as u32,
        }
    }
}

impl Quote<'_> {
    /// Appends the protobuf encoding (proto3: default values are not written).
    pub fn encode_protobuf(&self, out: &mut Vec<u8>) {
        const LEN: u64 = 2;
        const I64: u64 = 1;
        const VARINT: u64 = 0;
        let key = |out: &mut Vec<u8>, field: u64, wire: u64| put_varint(out, field << 3 | wire);
        let base_len = 1
            + varint_len(self.ticker.len() as u64)
            + self.ticker.len()
            + 1
            + varint_len(self.timestamp as u64)
            + 1
            + varint_len(self.sequence_number as u64);
        key(out, 1, LEN);
        put_varint(out, base_len as u64);
        key(out, 1, LEN);
        put_varint(out, self.ticker.len() as u64);
        out.extend_from_slice(self.ticker.as_bytes());
        key(out, 2, VARINT);
        put_varint(out, self.timestamp as u64);
        key(out, 3, VARINT);
        put_varint(out, self.sequence_number as u64);
        let double = |out: &mut Vec<u8>, field: u64, v: f64| {
            if v != 0.0 {
                key(out, field, I64);
                out.extend_from_slice(&v.to_le_bytes());
            }
        };
        let varint = |out: &mut Vec<u8>, field: u64, v: u64| {
            if v != 0 {
                key(out, field, VARINT);
                put_varint(out, v);
            }
        };
        double(out, 2, self.bid_price);
        varint(out, 3, u64::from(self.bid_size));
        varint(out, 4, u64::from(self.bid_exchange));
        double(out, 5, self.ask_price);
        varint(out, 6, u64::from(self.ask_size));
        varint(out, 7, u64::from(self.ask_exchange));
        // int32 negative values are sign-extended to 10 bytes, as protobuf does.
        varint(out, 8, self.conditions as i64 as u64);
        varint(out, 9, self.indicators as i64 as u64);
        varint(out, 10, u64::from(self.tape));
    }

    /// Appends the JSON encoding (one object, `base` nested, no newline).
    pub fn encode_json(&self, out: &mut Vec<u8>) {
        // Tickers are plain ASCII symbols; no escaping is needed. Writing to a Vec cannot fail.
        let _ = write!(
            out,
            "{{\"base\":{{\"ticker\":\"{}\",\"timestamp\":{},\"sequence_number\":{}}},\"bid_price\":{:?},\"bid_size\":{},\"bid_exchange\":{},\"ask_price\":{:?},\"ask_size\":{},\"ask_exchange\":{},\"conditions\":{},\"indicators\":{},\"tape\":{}}}",
            self.ticker,
            self.timestamp,
            self.sequence_number,
            self.bid_price,
            self.bid_size,
            self.bid_exchange,
            self.ask_price,
            self.ask_size,
            self.ask_exchange,
            self.conditions,
            self.indicators,
            self.tape
        );
    }

    /// Appends the binary Avro encoding of `stocks.avsc`.
    pub fn encode_avro(&self, out: &mut Vec<u8>) {
        let long = |out: &mut Vec<u8>, v: i64| put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
        long(out, self.ticker.len() as i64);
        out.extend_from_slice(self.ticker.as_bytes());
        long(out, self.timestamp);
        long(out, self.sequence_number);
        out.extend_from_slice(&self.bid_price.to_le_bytes());
        long(out, i64::from(self.bid_size));
        long(out, i64::from(self.bid_exchange));
        out.extend_from_slice(&self.ask_price.to_le_bytes());
        long(out, i64::from(self.ask_size));
        long(out, i64::from(self.ask_exchange));
        long(out, i64::from(self.conditions));
        long(out, i64::from(self.indicators));
        long(out, i64::from(self.tape));
    }

    /// Appends the encoding `format` asks for.
    pub fn encode(&self, format: QuoteFormat, out: &mut Vec<u8>) {
        match format {
            QuoteFormat::Protobuf => self.encode_protobuf(out),
            QuoteFormat::Json => self.encode_json(out),
            QuoteFormat::Avro => self.encode_avro(out),
        }
    }
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

impl QuoteGenerator {
    /// Writes `count` framed quotes to `out`; returns the bytes written.
    pub fn write(
        &mut self,
        out: &mut dyn Write,
        count: u64,
        format: QuoteFormat,
        framing: Framing,
    ) -> io::Result<u64> {
        if framing == Framing::AvroContainer {
            return self.write_container(out, count, format);
        }
        let mut msg = Vec::with_capacity(256);
        let mut block = Vec::with_capacity(1 << 20);
        let mut total = 0u64;
        for _ in 0..count {
            msg.clear();
            self.next_or_repeat().encode(format, &mut msg);
            framing.write(&mut block, &msg).map_err(io::Error::other)?;
            if block.len() >= 1 << 20 {
                out.write_all(&block)?;
                total += block.len() as u64;
                block.clear();
            }
        }
        out.write_all(&block)?;
        total += block.len() as u64;
        out.flush()?;
        Ok(total)
    }

    /// Writes `count` quotes as an Avro object container file (blocks of about 64 KiB before
    /// compression, as Avro's Java writer makes them, compressed with the generator's
    /// container codec); returns the bytes written.
    fn write_container(
        &mut self,
        out: &mut dyn Write,
        count: u64,
        format: QuoteFormat,
    ) -> io::Result<u64> {
        if format != QuoteFormat::Avro {
            return Err(io::Error::other(
                "an Avro container file holds Avro values: give --format avro",
            ));
        }
        // Any 16 bytes do; fixed ones keep the output of one seed the same.
        const SYNC: [u8; 16] = *b"weir-quotes-sync";
        let mut file = Vec::with_capacity(1 << 20);
        let codec = self.container_codec;
        weir_codec::write_container_header(&mut file, STOCKS_AVSC, codec, &SYNC);
        let mut data = Vec::with_capacity(80 << 10);
        let mut scratch = Vec::new();
        let mut values = 0u64;
        let mut total = 0u64;
        for i in 0..count {
            self.next_or_repeat().encode(format, &mut data);
            values += 1;
            if data.len() >= 64 << 10 || i + 1 == count {
                weir_codec::write_container_block(
                    &mut file,
                    values,
                    &data,
                    codec,
                    &SYNC,
                    &mut scratch,
                )?;
                data.clear();
                values = 0;
                if file.len() >= 1 << 20 {
                    out.write_all(&file)?;
                    total += file.len() as u64;
                    file.clear();
                }
            }
        }
        out.write_all(&file)?;
        total += file.len() as u64;
        out.flush()?;
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes_and_ten_thousand_tickers() {
        let write = |seed| {
            let mut out = Vec::new();
            QuoteGenerator::new(seed)
                .write(&mut out, 1000, QuoteFormat::Protobuf, Framing::Varint)
                .unwrap();
            out
        };
        assert_eq!(write(7), write(7));
        assert_ne!(write(7), write(8));
        let g = QuoteGenerator::new(1);
        let distinct: std::collections::HashSet<_> = g.tickers.iter().collect();
        assert_eq!(distinct.len(), TICKERS);
    }

    #[test]
    fn varint_lengths() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
        }
    }

    #[test]
    fn start_and_gap_shape_the_event_time() {
        let start = 1_800_000_000_000_000_000;
        let mut g = QuoteGenerator::new(3).with_event_time(start, 1_000_000);
        let mut last = start;
        for _ in 0..1000 {
            let t = g.next_quote().timestamp;
            assert!(t > last && t - last <= 1_000_000, "{last} -> {t}");
            last = t;
        }
    }

    #[test]
    fn json_quotes_carry_the_same_fields() {
        let mut g = QuoteGenerator::new(3);
        for _ in 0..100 {
            let q = g.next_quote();
            let mut out = Vec::new();
            q.encode_json(&mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with(&format!("{{\"base\":{{\"ticker\":\"{}\"", q.ticker)));
            assert!(text.contains(&format!("\"timestamp\":{}", q.timestamp)));
            assert!(q.ask_price > q.bid_price);
        }
    }
}
