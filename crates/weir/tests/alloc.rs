//! The file scan allocates per batch, not per message: the allocations of a query over 300,000
//! messages minus those over 100,000 (which cancels planning and other fixed costs), divided by
//! the 200,000 extra messages, stay far below one.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use weir::{Engine, EngineOptions};
use weir_codec::Framing;
use weir_testdata::{QuoteFormat, QuoteGenerator, STOCKS_PROTO};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on unchanged to the system allocator, which upholds the
// GlobalAlloc contract; counting touches only an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; the caller's size contract holds.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_for(messages: u64, dir: &std::path::Path, rt: &tokio::runtime::Runtime) -> u64 {
    let data = dir.join(format!("q{messages}.bin"));
    let mut f = std::fs::File::create(&data).unwrap();
    QuoteGenerator::new(1)
        .write(&mut f, messages, QuoteFormat::Protobuf, Framing::Varint)
        .unwrap();
    let sql = format!(
        "CREATE SOURCE q (ticker VARCHAR, bid_price DOUBLE, ask_size INT UNSIGNED) INCLUDE offset \
         WITH ('connector' = 'file', 'path' = '{}', 'encoding' = 'protobuf', \
         'message' = 'stocks.QuoteNBBO', 'location' = '{}')",
        data.display(),
        dir.join("stocks.proto").display()
    );
    let engine = Engine::new(EngineOptions {
        partitions: 1,
        ..EngineOptions::default()
    });
    rt.block_on(async {
        engine.query(&sql).await.unwrap();
        let before = ALLOCS.load(Ordering::Relaxed);
        let batches = engine
            .query("SELECT ticker, bid_price, ask_size, _weir_offset FROM q")
            .await
            .unwrap();
        let after = ALLOCS.load(Ordering::Relaxed);
        assert_eq!(
            batches.iter().map(|b| b.num_rows() as u64).sum::<u64>(),
            messages
        );
        drop(batches);
        after - before
    })
}

#[test]
fn the_file_scan_allocates_per_batch_not_per_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stocks.proto"), STOCKS_PROTO).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let small = allocations_for(100_000, dir.path(), &rt);
    let large = allocations_for(300_000, dir.path(), &rt);
    let per_message = large.saturating_sub(small) as f64 / 200_000.0;
    eprintln!(
        "{small} allocations for 100k messages, {large} for 300k: {per_message:.4} per message"
    );
    assert!(per_message < 0.01, "{per_message} allocations per message");
}
