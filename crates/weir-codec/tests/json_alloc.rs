//! JSON decoding allocates per batch, not per message: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampNanosecondType, UInt32Type};
use weir_codec::{ColumnSpec, DataType, Decoder, JsonDecoder, JsonDecoderOptions, TimeUnit};

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

/// One quote as JSON, with an escaped string and keys nobody asked for.
fn quote(i: u64) -> String {
    format!(
        r#"{{"base": {{"ticker": "O:SPY{:06}C{:08}", "timestamp": {}, "sequence_number": {i}}}, "bid_price": {}, "bid_size": {}, "note": "caf\u00e9 \"{i}\"", "ask_price": {}, "extra": [1, {{"x": null}}], "conditions": -{}}}"#,
        250000 + i % 10_000,
        i % 977,
        1_790_000_000_000_000_000 + i,
        1.0 + i as f64 / 100.0,
        i % 500 + 1,
        2.0 + i as f64 / 100.0,
        i % 3
    )
}

#[test]
fn a_million_json_messages_allocate_per_batch() {
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None))
            .with_path("base.timestamp"),
        ColumnSpec::new("sequence_number", DataType::Int64).with_path("base.sequence_number"),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("note", DataType::Utf8),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("conditions", DataType::Int64),
    ];
    let mut dec = JsonDecoder::new(&cols, JsonDecoderOptions::default()).unwrap();

    // 1000 distinct messages, cycled: the input is built before counting starts.
    let msgs: Vec<String> = (0..1000u64).map(quote).collect();
    const N: usize = 1_000_000;
    let (mut batches, mut rows, mut checked) = (0usize, 0usize, false);
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..N {
        dec.decode(msgs[i % 1000].as_bytes()).unwrap();
        if let Some(batch) = dec.take_full_batch() {
            batches += 1;
            rows += batch.num_rows();
            if !checked {
                // Spot-check values once (allocations here are per batch too).
                let t = batch.column(0).as_string::<i32>();
                assert_eq!(t.value(5), "O:SPY250005C00000005");
                assert_eq!(
                    batch
                        .column(1)
                        .as_primitive::<TimestampNanosecondType>()
                        .value(7),
                    1_790_000_000_000_000_007
                );
                assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(9), 9);
                assert_eq!(batch.column(3).as_primitive::<Float64Type>().value(3), 1.03);
                assert_eq!(batch.column(4).as_primitive::<UInt32Type>().value(3), 4);
                assert_eq!(
                    batch.column(5).as_string::<i32>().value(2),
                    "caf\u{e9} \"2\""
                );
                assert_eq!(batch.column(7).as_primitive::<Int64Type>().value(2), -2);
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
    assert!(checked);
    let per_msg = allocs as f64 / N as f64;
    eprintln!("{allocs} allocations for {N} messages in {batches} batches ({per_msg:.5}/message)");
    assert!(per_msg < 0.01, "{per_msg} allocations per message");
}
