//! The floor of a protobuf projection: how long it takes only to find every field boundary of
//! the wide corpus (read each tag, step over each value), with no table, no column and no
//! checks beyond bounds. Any decoder that honours protobuf's rules (a field may appear anywhere,
//! the last one wins) must do at least this much for the 5-of-50 projection, so
//! `50-column time / this` bounds the projection ratio from above.
//!
//! For the quote message it also times `QuoteIdeal`: the decoder a perfect code generator would
//! emit for `stocks.QuoteNBBO` and these 12 columns (straight-line code, values in locals, plain
//! vectors as columns, reused, no builders). Whatever weir does, it cannot beat that by much, so
//! `prost-derive time / ideal time` bounds how far ahead of prost-derive any decoder can be.
//!
//! `cargo run --release --bin scan_floor [loops]`

use std::hint::black_box;
use std::time::Instant;

use weir_bench::{quote::QuoteWorkload, wide::WideWorkload, Contender, Corpus, Result};

/// Length of the varint at `p` (at most 10 bytes), one byte at a time.
#[inline(always)]
fn varint_len_loop(b: &[u8], p: usize) -> usize {
    let mut i = 0;
    while b[p + i] >= 0x80 {
        i += 1;
    }
    i + 1
}

/// Length of the varint at `p` with one word load and a bit scan; the corpus is padded so eight
/// bytes can be read at any position.
#[inline(always)]
fn varint_len_swar(b: &[u8], p: usize) -> usize {
    let w = u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
    let stops = !w & 0x8080_8080_8080_8080;
    if stops == 0 {
        return 8 + varint_len_loop(b, p + 8);
    }
    (stops.trailing_zeros() / 8 + 1) as usize
}

#[inline(always)]
fn varint_swar(b: &[u8], p: usize) -> (u64, usize) {
    let w = u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
    let stops = !w & 0x8080_8080_8080_8080;
    if stops == 0 {
        // Nine or ten bytes: rare here, done bytewise.
        let mut v = 0u64;
        let n = 8 + varint_len_loop(b, p + 8);
        for i in 0..n {
            v |= ((b[p + i] & 0x7f) as u64) << (7 * i);
        }
        return (v, n);
    }
    let bits = stops.trailing_zeros() + 1;
    let x = if bits >= 64 {
        w
    } else {
        w & ((1u64 << bits) - 1)
    };
    (pack7(x), (bits / 8) as usize)
}

/// Packs the low 7 bits of each of eight bytes (a copy of weir-codec's private helper: the
/// floor must use the same word technique as the decoder it bounds).
#[inline(always)]
fn pack7(x: u64) -> u64 {
    let x = x & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

#[inline(always)]
fn f64_at(b: &[u8], p: usize) -> f64 {
    f64::from_le_bytes(b[p..p + 8].try_into().unwrap())
}

/// Steps over the value of an unknown field (valid input assumed, as in the scans above).
#[inline(always)]
fn skip(b: &[u8], p: usize, wt: u64) -> usize {
    match wt {
        0 => p + varint_len_swar(b, p),
        1 => p + 8,
        2 => {
            let (len, ll) = varint_swar(b, p);
            p + ll + len as usize
        }
        _ => p + 4,
    }
}

/// The ideal generated decoder for the quote's 12 columns (see the module doc).
#[derive(Default)]
struct QuoteIdeal {
    ticker_offsets: Vec<i32>,
    ticker_bytes: Vec<u8>,
    base_valid: Vec<bool>,
    timestamp: Vec<i64>,
    sequence_number: Vec<i64>,
    bid_price: Vec<f64>,
    bid_size: Vec<u32>,
    bid_exchange: Vec<u32>,
    ask_price: Vec<f64>,
    ask_size: Vec<u32>,
    ask_exchange: Vec<u32>,
    conditions: Vec<i32>,
    indicators: Vec<i32>,
    tape: Vec<u32>,
}

impl QuoteIdeal {
    fn clear(&mut self) {
        self.ticker_offsets.clear();
        self.ticker_offsets.push(0);
        self.ticker_bytes.clear();
        self.base_valid.clear();
        self.timestamp.clear();
        self.sequence_number.clear();
        self.bid_price.clear();
        self.bid_size.clear();
        self.bid_exchange.clear();
        self.ask_price.clear();
        self.ask_size.clear();
        self.ask_exchange.clear();
        self.conditions.clear();
        self.indicators.clear();
        self.tape.clear();
    }

    #[inline(always)]
    fn decode(&mut self, b: &[u8], end: usize) -> bool {
        let (mut bid_price, mut ask_price) = (0f64, 0f64);
        let (mut bid_size, mut bid_exchange, mut ask_size, mut ask_exchange, mut tape) =
            (0u32, 0u32, 0u32, 0u32, 0u32);
        let (mut conditions, mut indicators) = (0i32, 0i32);
        let (mut base, mut ticker, mut timestamp, mut sequence) =
            (false, (0usize, 0usize), 0i64, 0i64);
        let mut pos = 0;
        while pos < end {
            let (tag, tl) = varint_swar(b, pos);
            pos += tl;
            match tag {
                0x0a => {
                    let (len, ll) = varint_swar(b, pos);
                    pos += ll;
                    let sub_end = pos + len as usize;
                    base = true;
                    while pos < sub_end {
                        let (tag, tl) = varint_swar(b, pos);
                        pos += tl;
                        match tag {
                            0x0a => {
                                let (len, ll) = varint_swar(b, pos);
                                pos += ll;
                                ticker = (pos, len as usize);
                                pos += len as usize;
                            }
                            0x10 => {
                                let (v, n) = varint_swar(b, pos);
                                timestamp = v as i64;
                                pos += n;
                            }
                            0x18 => {
                                let (v, n) = varint_swar(b, pos);
                                sequence = v as i64;
                                pos += n;
                            }
                            t => pos = skip(b, pos, t & 7),
                        }
                    }
                }
                0x11 => {
                    bid_price = f64_at(b, pos);
                    pos += 8;
                }
                0x29 => {
                    ask_price = f64_at(b, pos);
                    pos += 8;
                }
                0x18 | 0x20 | 0x30 | 0x38 | 0x40 | 0x48 | 0x50 => {
                    let (v, n) = varint_swar(b, pos);
                    pos += n;
                    match tag {
                        0x18 => bid_size = v as u32,
                        0x20 => bid_exchange = v as u32,
                        0x30 => ask_size = v as u32,
                        0x38 => ask_exchange = v as u32,
                        0x40 => conditions = v as i32,
                        0x48 => indicators = v as i32,
                        _ => tape = v as u32,
                    }
                }
                t => pos = skip(b, pos, t & 7),
            }
        }
        // Strings must be valid UTF-8 (weir checks them too).
        let t = &b[ticker.0..ticker.0 + ticker.1];
        if !t.is_ascii() && std::str::from_utf8(t).is_err() {
            return false;
        }
        self.ticker_bytes.extend_from_slice(t);
        self.ticker_offsets.push(self.ticker_bytes.len() as i32);
        self.base_valid.push(base);
        self.timestamp.push(timestamp);
        self.sequence_number.push(sequence);
        self.bid_price.push(bid_price);
        self.bid_size.push(bid_size);
        self.bid_exchange.push(bid_exchange);
        self.ask_price.push(ask_price);
        self.ask_size.push(ask_size);
        self.ask_exchange.push(ask_exchange);
        self.conditions.push(conditions);
        self.indicators.push(indicators);
        self.tape.push(tape);
        true
    }
}

/// Runs one contender over the corpus and keeps its best time in ns per message.
fn timed(best: &mut f64, n: f64, run: impl FnOnce() -> Result<usize>) -> Result<()> {
    let t = Instant::now();
    run()?;
    *best = best.min(t.elapsed().as_secs_f64() * 1e9 / n);
    Ok(())
}

/// Copies each message into one buffer with 16 bytes of padding after it.
fn padded(corpus: &Corpus) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut padded = Vec::new();
    let mut spans = Vec::new();
    for m in corpus.iter() {
        spans.push((padded.len(), m.len()));
        padded.extend_from_slice(m);
        padded.extend_from_slice(&[0; 16]);
    }
    (padded, spans)
}

fn scan(b: &[u8], end: usize, swar: bool) -> usize {
    let mut pos = 0;
    let mut fields = 0;
    while pos < end {
        let (tag, tl) = if swar {
            varint_swar(b, pos)
        } else {
            let n = varint_len_loop(b, pos);
            let mut v = 0u64;
            for i in 0..n {
                v |= ((b[pos + i] & 0x7f) as u64) << (7 * i);
            }
            (v, n)
        };
        pos += tl;
        match tag & 7 {
            0 => {
                pos += if swar {
                    varint_len_swar(b, pos)
                } else {
                    varint_len_loop(b, pos)
                }
            }
            1 => pos += 8,
            2 => {
                let (len, ll) = varint_swar(b, pos);
                pos += ll + len as usize;
            }
            5 => pos += 4,
            _ => return usize::MAX,
        }
        fields += 1;
    }
    fields
}

fn main() -> Result<()> {
    let loops: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    quote(loops)?;
    let w = WideWorkload::new(200_000)?;
    let (padded, spans) = padded(&w.corpus);
    let n = spans.len() as f64;
    let mut five = w.weir_five()?;
    let mut all = w.weir_all()?;
    let (mut best_loop, mut best_swar, mut best5, mut best50) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..loops {
        for swar in [false, true] {
            let t = Instant::now();
            let mut f = 0;
            for &(at, len) in &spans {
                f += scan(black_box(&padded[at..at + len + 16]), len, swar);
            }
            black_box(f);
            let e = t.elapsed().as_secs_f64() * 1e9 / n;
            if swar {
                best_swar = best_swar.min(e);
            } else {
                best_loop = best_loop.min(e);
            }
        }
        timed(&mut best5, n, || five.run_count(&w.corpus))?;
        timed(&mut best50, n, || all.run_count(&w.corpus))?;
    }
    println!("wide corpus, best of {loops}, ns/message:");
    println!("  boundary scan, byte loop   {best_loop:7.1}");
    println!("  boundary scan, word+bitscan {best_swar:7.1}");
    println!("  weir, 5 columns            {best5:7.1}");
    println!("  weir, 50 columns           {best50:7.1}");
    println!(
        "  50 columns / floor: {:.2}x (byte loop), {:.2}x (word); 50 / 5 now: {:.2}x",
        best50 / best_loop,
        best50 / best_swar,
        best50 / best5
    );
    Ok(())
}

fn quote(loops: usize) -> Result<()> {
    let w = QuoteWorkload::new(1_000_000)?;
    let (padded, spans) = padded(&w.corpus);
    let n = spans.len() as f64;
    let mut ideal = QuoteIdeal::default();
    ideal.clear();
    let mut prost = w.after();
    let mut ptars = w.ptars()?;
    let mut weir = w.weir()?;
    let (mut best_scan, mut best_ideal, mut best_prost, mut best_ptars, mut best_weir) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..loops {
        let t = Instant::now();
        let mut f = 0;
        for &(at, len) in &spans {
            f += scan(black_box(&padded[at..at + len + 16]), len, true);
        }
        black_box(f);
        best_scan = best_scan.min(t.elapsed().as_secs_f64() * 1e9 / n);

        let t = Instant::now();
        for (i, &(at, len)) in spans.iter().enumerate() {
            if !ideal.decode(black_box(&padded[at..at + len + 16]), len) {
                return Err("ideal decoder: invalid UTF-8".into());
            }
            if i % 8192 == 8191 {
                black_box(&ideal.tape);
                ideal.clear();
            }
        }
        black_box(&ideal.tape);
        ideal.clear();
        best_ideal = best_ideal.min(t.elapsed().as_secs_f64() * 1e9 / n);

        timed(&mut best_prost, n, || prost.run_count(&w.corpus))?;
        timed(&mut best_ptars, n, || ptars.run_count(&w.corpus))?;
        timed(&mut best_weir, n, || weir.run_count(&w.corpus))?;
    }
    println!("quote corpus, best of {loops}, ns/message:");
    println!("  top-level boundary scan    {best_scan:7.1}");
    println!("  ideal generated decoder    {best_ideal:7.1}");
    println!("  b. prost-derive + builders {best_prost:7.1}");
    println!("  c. ptars                   {best_ptars:7.1}");
    println!("  d. weir                    {best_weir:7.1}");
    println!(
        "  prost / ideal: {:.2}x; prost / weir: {:.2}x; ptars / ideal: {:.2}x; ptars / weir: {:.2}x; weir / ideal: {:.2}x",
        best_prost / best_ideal,
        best_prost / best_weir,
        best_ptars / best_ideal,
        best_ptars / best_weir,
        best_weir / best_ideal
    );
    Ok(())
}
