//! Decoding allocates per batch, not per message: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt32Type};
use weir_codec::{ColumnSpec, DataType, Decoder, ProtoDecoder, ProtoDecoderOptions, ProtoSchema};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One QuoteNBBO, encoded by hand so the test needs no generated code.
fn quote(i: u64, out: &mut Vec<u8>) {
    let mut base = Vec::new();
    let ticker = format!("O:SPY{:06}C{:08}", 250000 + i % 10_000, i % 977);
    base.push(0x0a);
    varint(&mut base, ticker.len() as u64);
    base.extend_from_slice(ticker.as_bytes());
    base.push(0x10);
    varint(&mut base, 1_790_000_000_000_000_000 + i);
    base.push(0x18);
    varint(&mut base, i);
    out.push(0x0a);
    varint(out, base.len() as u64);
    out.extend_from_slice(&base);
    out.push(0x11);
    out.extend_from_slice(&(1.0 + i as f64 / 100.0).to_le_bytes());
    out.push(0x18);
    varint(out, i % 500 + 1);
    out.push(0x29);
    out.extend_from_slice(&(2.0 + i as f64 / 100.0).to_le_bytes());
    out.push(0x40);
    varint(out, (-((i % 3) as i64)) as u64);
}

#[test]
fn a_million_messages_allocate_per_batch() {
    let dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let schema = ProtoSchema::from_proto_file(format!("{dir}/testdata/stocks.proto"), &[]).unwrap();
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Int64).with_path("base.timestamp"),
        ColumnSpec::new("sequence_number", DataType::Int64),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("conditions", DataType::Int32),
    ];
    let mut dec = ProtoDecoder::new(
        &schema,
        "stocks.QuoteNBBO",
        &cols,
        ProtoDecoderOptions::default(),
    )
    .unwrap();

    // 1000 distinct messages, cycled: the input is built before counting starts.
    let mut bufs = Vec::new();
    for i in 0..1000u64 {
        let mut b = Vec::new();
        quote(i, &mut b);
        bufs.push(b);
    }
    const N: usize = 1_000_000;
    let mut batches = 0usize;
    let mut rows = 0usize;
    let mut checked = false;
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..N {
        dec.decode(&bufs[i % 1000]).unwrap();
        if let Some(batch) = dec.take_full_batch() {
            batches += 1;
            rows += batch.num_rows();
            if !checked {
                // Spot-check values once (allocations here are per batch too).
                let t = batch.column(0).as_string::<i32>();
                assert_eq!(t.value(5), "O:SPY250005C00000005");
                assert_eq!(
                    batch.column(1).as_primitive::<Int64Type>().value(7),
                    1_790_000_000_000_000_007
                );
                assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(9), 9);
                assert_eq!(batch.column(3).as_primitive::<Float64Type>().value(3), 1.03);
                assert_eq!(batch.column(4).as_primitive::<UInt32Type>().value(3), 4);
                assert_eq!(
                    batch
                        .column(6)
                        .as_primitive::<arrow_array::types::Int32Type>()
                        .value(2),
                    -2
                );
                checked = true;
            }
        }
    }
    if let Some(b) = dec.flush() {
        batches += 1;
        rows += b.num_rows();
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    assert_eq!(rows, N);
    let per_msg = allocs as f64 / N as f64;
    eprintln!("{allocs} allocations for {N} messages in {batches} batches ({per_msg:.5}/message)");
    assert!(per_msg < 0.01, "{per_msg} allocations per message");
}
