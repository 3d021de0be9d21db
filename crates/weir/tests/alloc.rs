//! The file scan allocates per batch, not per message: the allocations of a query over 300,000
//! messages minus those over 100,000 (which cancels planning and other fixed costs), divided by
//! the 200,000 extra messages, stay far below one.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use weir::engine::{Engine, EngineOptions};
use weir::gen::{write_quotes, QuoteFormat, STOCKS_PROTO};
use weir::source::framing::Framing;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_for(messages: u64, dir: &std::path::Path, rt: &tokio::runtime::Runtime) -> u64 {
    let data = dir.join(format!("q{messages}.bin"));
    let mut f = std::fs::File::create(&data).unwrap();
    write_quotes(&mut f, messages, 1, QuoteFormat::Protobuf, Framing::Varint).unwrap();
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
