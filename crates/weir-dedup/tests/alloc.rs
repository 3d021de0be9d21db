//! Dedup allocates per batch and per step, never per key: after a warm-up, deduplicating
//! 819,200 rows (10% duplicates) in batches of 8,192 with a commit every 10 batches must take
//! fewer than 0.01 Rust allocations per row. (Its own test binary: the global allocator counts.
//! RocksDB's C++ allocations are its own and not counted.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use weir_dedup::{Checkpoint, DedupKey, KeyColumns, KeyMode, StateOptions, StateStore};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const BATCH: usize = 8192;

fn batches(schema: &Arc<Schema>, n: usize) -> Vec<RecordBatch> {
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut seq = 0i64;
    let tickers: Vec<String> = (0..10_000).map(|i| format!("O:T{i:05}C")).collect();
    let mut recent: Vec<(usize, i64)> = Vec::new();
    (0..n)
        .map(|_| {
            let mut t = Vec::with_capacity(BATCH);
            let mut s = Vec::with_capacity(BATCH);
            for _ in 0..BATCH {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let (ti, sq) = if rng % 10 == 0 && !recent.is_empty() {
                    recent[(rng >> 8) as usize % recent.len()]
                } else {
                    seq += 1;
                    let k = ((rng >> 20) % 10_000) as usize;
                    if recent.len() < 4096 {
                        recent.push((k, seq));
                    } else {
                        recent[seq as usize % 4096] = (k, seq);
                    }
                    (k, seq)
                };
                t.push(tickers[ti].as_str());
                s.push(sq);
            }
            let cols: Vec<ArrayRef> = vec![
                Arc::new(StringArray::from(t)),
                Arc::new(Int64Array::from(s)),
            ];
            RecordBatch::try_new(Arc::clone(schema), cols).unwrap()
        })
        .collect()
}

#[test]
fn dedup_allocates_per_batch_not_per_key() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("ticker", DataType::Utf8, false),
        Field::new("seq", DataType::Int64, false),
    ]));
    let all = batches(&schema, 104);
    let dir = tempfile::tempdir().unwrap();
    let mut store = StateStore::open(
        dir.path(),
        StateOptions {
            key: Some(DedupKey {
                columns: KeyColumns::resolve(&schema, &["ticker".into(), "seq".into()], None)
                    .unwrap(),
                mode: KeyMode::Xxh3_128,
                ttl: None,
            }),
            ..StateOptions::default()
        },
    )
    .unwrap();
    let mut dropped = 0;
    for (i, b) in all.iter().enumerate() {
        if i == 4 {
            COUNTING.store(true, Ordering::SeqCst);
        }
        if let Some(mask) = store.dedup(b).unwrap() {
            dropped += mask.false_count();
        }
        if i % 10 == 9 {
            store.commit(Checkpoint::default()).unwrap();
        }
    }
    store.finish().unwrap();
    COUNTING.store(false, Ordering::SeqCst);
    let rows = (all.len() - 4) * BATCH;
    let allocations = ALLOCATIONS.load(Ordering::SeqCst);
    let per_row = allocations as f64 / rows as f64;
    assert!(dropped > rows / 20, "only {dropped} duplicates dropped");
    assert!(
        per_row < 0.01,
        "{allocations} allocations for {rows} rows ({per_row:.4} a row)"
    );
    eprintln!("{allocations} allocations for {rows} rows ({per_row:.5} a row)");
}
