//! Dedup and checkpoint behaviour on a real RocksDB state directory.

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use weir_dedup::{Checkpoint, DedupKey, KeyColumns, KeyMode, StateOptions, StateStore};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("ticker", DataType::Utf8, true),
        Field::new("seq", DataType::Int64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
    ]))
}

fn batch(rows: &[(Option<&str>, Option<i64>, i64)]) -> RecordBatch {
    let t: ArrayRef = Arc::new(StringArray::from(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
    ));
    let s: ArrayRef = Arc::new(Int64Array::from(
        rows.iter().map(|r| r.1).collect::<Vec<_>>(),
    ));
    let ts: ArrayRef = Arc::new(
        TimestampMillisecondArray::from(rows.iter().map(|r| r.2).collect::<Vec<_>>())
            .with_timezone("UTC"),
    );
    RecordBatch::try_new(schema(), vec![t, s, ts]).unwrap()
}

fn key(cols: &[&str], mode: KeyMode, ttl_ms: Option<i64>) -> StateOptions {
    let names: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
    let time = ttl_ms.map(|_| "ts");
    StateOptions {
        key: Some(DedupKey {
            columns: KeyColumns::resolve(&schema(), &names, time).unwrap(),
            mode,
            ttl: ttl_ms,
        }),
        block_cache_bytes: 8 << 20,
        recent_keys: 1024,
    }
}

/// The indexes of the rows kept.
fn kept(store: &mut StateStore, b: &RecordBatch) -> Vec<usize> {
    match store.dedup(b).unwrap() {
        None => (0..b.num_rows()).collect(),
        Some(mask) => (0..mask.len()).filter(|&i| mask.value(i)).collect(),
    }
}

fn commit(store: &mut StateStore, pos: i64) {
    store
        .commit(Checkpoint {
            positions: vec![("p0".into(), pos)],
            files: vec![format!("part-{pos}.parquet")],
            ..Checkpoint::default()
        })
        .unwrap();
}

#[test]
fn multi_column_keys_in_both_modes_keep_the_first_occurrence() {
    for mode in [KeyMode::Xxh3_128, KeyMode::Raw] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StateStore::open(dir.path(), key(&["ticker", "seq"], mode, None)).unwrap();
        let b = batch(&[
            (Some("AAPL"), Some(1), 0),
            (Some("AAPL"), Some(2), 0),
            (Some("MSFT"), Some(1), 0),
            (Some("AAPL"), Some(1), 0), // duplicate within the batch
            (None, Some(1), 0),
            (None, Some(1), 0), // null is a value: duplicate
            (Some("AAP"), Some(1), 0),
        ]);
        assert_eq!(kept(&mut s, &b), vec![0, 1, 2, 4, 6], "{mode:?}");
        // Across batches of the same (uncommitted) step.
        let b2 = batch(&[(Some("MSFT"), Some(1), 0), (Some("MSFT"), Some(2), 0)]);
        assert_eq!(kept(&mut s, &b2), vec![1], "{mode:?}");
        let st = s.stats();
        assert_eq!(st.duplicates_dropped, 3);
        assert_eq!(st.rows, 9);
        // Every duplicate was answered from memory, and no new key needed RocksDB: the key
        // filter knew none of them.
        assert_eq!(st.recent_hits, 3, "{st}");
        assert_eq!(st.lookups, 0, "{st}");
    }
}

#[test]
fn string_boundaries_are_part_of_the_key() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Utf8, false),
        Field::new("b", DataType::Utf8, false),
    ]));
    let b = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringArray::from(vec!["ab", "a"])),
            Arc::new(StringArray::from(vec!["c", "bc"])),
        ],
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = StateOptions {
        key: Some(DedupKey {
            columns: KeyColumns::resolve(&schema, &["a".into(), "b".into()], None).unwrap(),
            mode: KeyMode::Raw,
            ttl: None,
        }),
        ..StateOptions::default()
    };
    let mut s = StateStore::open(dir.path(), options).unwrap();
    assert!(s.dedup(&b).unwrap().is_none());
}

#[test]
fn restart_keeps_committed_keys_and_forgets_uncommitted_ones() {
    for mode in [KeyMode::Xxh3_128, KeyMode::Raw] {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = StateStore::open(dir.path(), key(&["seq"], mode, None)).unwrap();
            assert_eq!(s.checkpoint().step, 0);
            let b = batch(&[(Some("A"), Some(1), 0), (Some("A"), Some(2), 0)]);
            assert_eq!(kept(&mut s, &b), vec![0, 1]);
            commit(&mut s, 2);
            // Seen, but never committed: a crash here must forget it.
            let b = batch(&[(Some("A"), Some(3), 0)]);
            assert_eq!(kept(&mut s, &b), vec![0]);
        }
        let mut s = StateStore::open(dir.path(), key(&["seq"], mode, None)).unwrap();
        assert_eq!(s.checkpoint().step, 1);
        assert_eq!(s.checkpoint().positions, vec![("p0".to_string(), 2)]);
        assert_eq!(s.committed_files().unwrap(), vec!["part-2.parquet"]);
        // 1 and 2 come from RocksDB (memory is empty after the restart); 3 is new again.
        let b = batch(&[
            (Some("A"), Some(1), 0),
            (Some("A"), Some(3), 0),
            (Some("A"), Some(2), 0),
        ]);
        assert_eq!(kept(&mut s, &b), vec![1], "{mode:?}");
        let st = s.stats();
        // Counters carry over from the first run's commit (2 rows then). The key filter,
        // loaded from RocksDB at open, sends 1 and 2 to RocksDB and settles 3 alone.
        assert_eq!(st.lookups, 2);
        assert_eq!(st.recent_hits, 0);
        assert_eq!(st.rows, 5);
    }
}

#[test]
fn keys_expire_after_the_ttl_relative_to_the_largest_time_seen() {
    for mode in [KeyMode::Xxh3_128, KeyMode::Raw] {
        let dir = tempfile::tempdir().unwrap();
        let opts = || key(&["ticker"], mode, Some(1000));
        {
            let mut s = StateStore::open(dir.path(), opts()).unwrap();
            let b = batch(&[(Some("A"), Some(1), 0), (Some("B"), Some(1), 500)]);
            assert_eq!(kept(&mut s, &b), vec![0, 1]);
            // Time 900: A (0) is 900 old, still live.
            let b = batch(&[(Some("A"), Some(2), 900)]);
            assert_eq!(kept(&mut s, &b), vec![] as Vec<usize>);
            // Time 1200 moves the clock: A (0) expired and comes back, in the same step, so
            // the step's commit holds A twice and must keep the later one; B (500) is live.
            let b = batch(&[
                (Some("C"), Some(1), 1200),
                (Some("A"), Some(3), 1200),
                (Some("B"), Some(2), 1200),
            ]);
            assert_eq!(kept(&mut s, &b), vec![0, 1]);
            commit(&mut s, 6);
        }
        // After a restart the largest time seen is remembered: B (500) expires at 1501, and
        // A is live with its time 1200.
        let mut s = StateStore::open(dir.path(), opts()).unwrap();
        let b = batch(&[(Some("B"), Some(3), 1400), (Some("A"), Some(4), 1400)]);
        assert_eq!(kept(&mut s, &b), vec![] as Vec<usize>, "{mode:?}");
        let b = batch(&[(Some("Z"), Some(1), 1600), (Some("B"), Some(4), 1600)]);
        assert_eq!(kept(&mut s, &b), vec![0, 1], "{mode:?}");
        assert!(s.stats().keys_expired >= 2);
    }
}

/// Step 1 keeps keys 1 and 2 (files "part-2.parquet"), and the run finishes cleanly.
fn first_step_finished(dir: &std::path::Path, options: StateOptions) {
    let mut s = StateStore::open(dir, options).unwrap();
    let b = batch(&[(Some("A"), Some(1), 0), (Some("A"), Some(2), 0)]);
    assert_eq!(kept(&mut s, &b), vec![0, 1]);
    commit(&mut s, 2);
    s.finish().unwrap();
}

#[test]
fn a_table_file_left_by_a_crash_before_its_ingestion_is_not_part_of_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || key(&["seq"], KeyMode::Xxh3_128, None);
    first_step_finished(dir.path(), opts());
    // What a crash between building step 2's file and ingesting it leaves behind.
    let ingest = dir.path().join("ingest");
    let left = ingest.join("step-00000000000000000002.sst");
    std::fs::write(&left, b"half a table file").unwrap();
    let mut s = StateStore::open(dir.path(), opts()).unwrap();
    assert!(!left.exists(), "the leftover file is removed at open");
    assert_eq!(s.checkpoint().step, 1);
    let b = batch(&[(Some("A"), Some(2), 0), (Some("A"), Some(3), 0)]);
    assert_eq!(kept(&mut s, &b), vec![1]);
    commit(&mut s, 3);
    s.finish().unwrap();
    assert_eq!(
        s.committed_files().unwrap(),
        vec!["part-2.parquet", "part-3.parquet"]
    );
}

#[test]
fn other_dedup_settings_on_the_same_directory_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s =
            StateStore::open(dir.path(), key(&["ticker"], KeyMode::Xxh3_128, None)).unwrap();
        commit(&mut s, 1);
    }
    let e = StateStore::open(dir.path(), key(&["ticker"], KeyMode::Raw, None)).unwrap_err();
    assert!(e.to_string().contains("hash=xxh3_128"), "{e}");
    // A second writer on an open directory is refused too (RocksDB's lock).
    let _first = StateStore::open(dir.path(), key(&["ticker"], KeyMode::Xxh3_128, None)).unwrap();
    let e = StateStore::open(dir.path(), key(&["ticker"], KeyMode::Xxh3_128, None)).unwrap_err();
    assert!(e.to_string().contains("lock"), "{e}");
}

#[test]
fn bad_key_settings_name_the_column() {
    let e = KeyColumns::resolve(&schema(), &["nope".into()], None).unwrap_err();
    assert!(e.to_string().contains("'nope'"), "{e}");
    assert!(e.to_string().contains("ticker, seq, ts"), "{e}");
    let e = KeyColumns::resolve(&schema(), &["ticker".into()], Some("ticker")).unwrap_err();
    assert!(e.to_string().contains("TIMESTAMP"), "{e}");
}

#[test]
fn many_keys_past_the_memory_sets_still_dedup_through_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = StateStore::open(dir.path(), key(&["seq"], KeyMode::Xxh3_128, None)).unwrap();
    let n = 20_000i64;
    for chunk in 0..(n / 1000) {
        let rows: Vec<_> = (chunk * 1000..(chunk + 1) * 1000)
            .map(|i| (Some("X"), Some(i), 0))
            .collect();
        assert_eq!(kept(&mut s, &batch(&rows)).len(), 1000);
        commit(&mut s, chunk);
    }
    // The in-memory sets hold at most two generations of ~1024 keys; the rest is in RocksDB.
    let rows: Vec<_> = (0..n).step_by(7).map(|i| (Some("X"), Some(i), 0)).collect();
    let b = batch(&rows);
    let mask: BooleanArray = s.dedup(&b).unwrap().expect("all are duplicates");
    assert_eq!(mask.true_count(), 0);
    let st = s.stats();
    assert!(st.lookups > 0 && st.recent_keys_in_memory < 5000, "{st}");
    assert_eq!(st.keys_written, n as u64);
}

#[test]
fn keys_many_batches_old_are_found_in_the_open_step_and_the_step_in_flight() {
    // More keys than `recent_keys` (1,024) in the open step, and a step still being committed
    // when the next batch is checked: RocksDB has neither yet, so memory must answer exactly,
    // with each key's latest time.
    let numbered = |from: i64, to: i64, t: i64| -> Vec<(Option<&'static str>, Option<i64>, i64)> {
        (from..to).map(|i| (Some("K"), Some(i), t)).collect()
    };
    for mode in [KeyMode::Xxh3_128, KeyMode::Raw] {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StateStore::open(dir.path(), key(&["seq"], mode, Some(1000))).unwrap();
        assert_eq!(kept(&mut s, &batch(&numbered(0, 2000, 0))).len(), 2000);
        // Key 0 expires (time 1200) and comes back: the open step holds it twice, and only
        // its later time (1200) keeps it live below.
        let mut rows = numbered(2000, 4000, 1200);
        rows.push((Some("K"), Some(0), 1200));
        assert_eq!(kept(&mut s, &batch(&rows)).len(), 2001, "{mode:?}");
        assert_eq!(
            kept(&mut s, &batch(&numbered(4000, 6000, 1200))).len(),
            2000
        );
        assert_eq!(
            kept(&mut s, &batch(&numbered(6000, 8000, 1200))).len(),
            2000
        );
        let before = s.stats();
        // At time 1900: key 0 (1200) is live; keys 1-299 (time 0) expired and come back;
        // keys 2000-2299 (1200) are live.
        let mut rows = numbered(0, 300, 1900);
        rows.extend(numbered(2000, 2300, 1900));
        let kept_rows = kept(&mut s, &batch(&rows));
        assert_eq!(kept_rows, (1..300).collect::<Vec<_>>(), "{mode:?}");
        assert_eq!(
            s.stats().lookups,
            before.lookups,
            "{mode:?}: answered from memory"
        );
        // The step goes in flight; the next batch is checked against it at once.
        commit(&mut s, 1);
        let mut rows = numbered(2300, 2600, 1900);
        rows.extend(numbered(9000, 9100, 1900));
        assert_eq!(
            kept(&mut s, &batch(&rows)),
            (300..400).collect::<Vec<_>>(),
            "{mode:?}"
        );
        commit(&mut s, 2);
        s.finish().unwrap();
        // After the restart, RocksDB answers for the same keys.
        drop(s);
        let mut s = StateStore::open(dir.path(), key(&["seq"], mode, Some(1000))).unwrap();
        let mut rows = numbered(2600, 2700, 1900);
        rows.extend(numbered(9100, 9150, 1900));
        assert_eq!(
            kept(&mut s, &batch(&rows)),
            (100..150).collect::<Vec<_>>(),
            "{mode:?}"
        );
    }
}

#[test]
fn a_clean_finish_saves_the_key_filter_and_a_crash_makes_it_stale() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || key(&["seq"], KeyMode::Xxh3_128, None);
    first_step_finished(dir.path(), opts());
    assert!(dir.path().join("key-filter").exists());
    {
        // Opens on the saved filter: 1 is known, 3 is new.
        let mut s = StateStore::open(dir.path(), opts()).unwrap();
        let b = batch(&[(Some("A"), Some(1), 0), (Some("A"), Some(3), 0)]);
        assert_eq!(kept(&mut s, &b), vec![1]);
        commit(&mut s, 3);
        // No finish: as after a crash, the saved filter still describes step 1.
    }
    // Had the stale filter been loaded, it would call 3 (committed in step 2) new.
    let mut s = StateStore::open(dir.path(), opts()).unwrap();
    assert_eq!(s.checkpoint().step, 2);
    let b = batch(&[(Some("A"), Some(3), 0), (Some("A"), Some(4), 0)]);
    assert_eq!(kept(&mut s, &b), vec![1]);
}

/// Commits a step whose checkpoint holds `state`.
fn commit_state(store: &mut StateStore, pos: i64, state: Vec<u8>) {
    store
        .commit(Checkpoint {
            positions: vec![("p0".into(), pos)],
            files: vec![format!("part-{pos}.parquet")],
            state,
            ..Checkpoint::default()
        })
        .unwrap();
}

/// `n` bytes that differ from one seed to another and do not repeat.
fn state_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Checkpoints only, and with a dedup key: the checkpoint record goes in through a write batch
/// in the first, in the step's table file in the second.
fn both_kinds() -> [StateOptions; 2] {
    [
        StateOptions::default(),
        key(&["seq"], KeyMode::Xxh3_128, None),
    ]
}

#[test]
fn the_operator_state_round_trips_through_commit_and_reopen() {
    for opts in both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            assert!(s.checkpoint().state.is_empty());
            kept(&mut s, &batch(&[(Some("A"), Some(1), 0)]));
            commit_state(&mut s, 1, b"window [0, 60): count 1".to_vec());
            assert_eq!(s.checkpoint().state, b"window [0, 60): count 1");
            kept(&mut s, &batch(&[(Some("A"), Some(2), 0)]));
            commit_state(&mut s, 2, b"window [0, 60): count 2".to_vec());
            s.finish().unwrap();
        }
        let s = StateStore::open(dir.path(), opts.clone()).unwrap();
        assert_eq!(s.checkpoint().step, 2);
        assert_eq!(s.checkpoint().positions, vec![("p0".to_string(), 2)]);
        assert_eq!(s.checkpoint().state, b"window [0, 60): count 2");
        assert_eq!(s.stats().state_bytes, 23);
        drop(s);
        let (checkpoint, _, stats) = StateStore::inspect(dir.path()).unwrap();
        assert_eq!(checkpoint.state, b"window [0, 60): count 2");
        assert_eq!(stats.state_bytes, 23);
        assert!(
            stats
                .to_string()
                .contains("operator state:         23 bytes"),
            "{stats}"
        );
    }
}

#[test]
fn a_reopen_without_finish_keeps_the_last_committed_state() {
    for opts in both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            kept(&mut s, &batch(&[(Some("A"), Some(1), 0)]));
            commit_state(&mut s, 1, state_bytes(1000, 1));
            kept(&mut s, &batch(&[(Some("A"), Some(2), 0)]));
            commit_state(&mut s, 2, state_bytes(1000, 2));
            // A step read but never committed, and no finish: as after a crash.
            kept(&mut s, &batch(&[(Some("A"), Some(3), 0)]));
        }
        let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
        assert_eq!(s.checkpoint().step, 2);
        assert_eq!(s.checkpoint().state, state_bytes(1000, 2));
        if opts.key.is_some() {
            // Committed keys stay, the uncommitted one is new again.
            let b = batch(&[(Some("A"), Some(2), 0), (Some("A"), Some(3), 0)]);
            assert_eq!(kept(&mut s, &b), vec![1]);
        }
        // The next step goes on from there.
        commit_state(&mut s, 3, state_bytes(10, 3));
        drop(s);
        let s = StateStore::open(dir.path(), opts).unwrap();
        assert_eq!(s.checkpoint().step, 3);
        assert_eq!(s.checkpoint().state, state_bytes(10, 3));
    }
}

#[test]
fn an_empty_state_stays_empty_and_replaces_a_committed_one() {
    for opts in both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            commit(&mut s, 1);
            s.finish().unwrap();
        }
        let (checkpoint, _, stats) = StateStore::inspect(dir.path()).unwrap();
        assert!(checkpoint.state.is_empty());
        assert_eq!(stats.state_bytes, 0);
        assert!(stats.to_string().contains("operator state:         none"));
        {
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            assert!(s.checkpoint().state.is_empty());
            commit_state(&mut s, 2, b"open window".to_vec());
            // The windows closed: the step commits no state, and none is left.
            commit_state(&mut s, 3, Vec::new());
            assert!(s.checkpoint().state.is_empty());
            s.finish().unwrap();
        }
        let s = StateStore::open(dir.path(), opts).unwrap();
        assert_eq!(s.checkpoint().step, 3);
        assert!(s.checkpoint().state.is_empty());
    }
}

/// A checkpoint record as the previous version wrote it (format 2, before the operator state):
/// the format byte, the step, the largest event time, the positions, the files, then 6 counters
/// and 11 RocksDB tickers, all little-endian, and nothing after.
fn format_2_record(step: u64, positions: &[(&str, i64)], files: &[&str], rows: u64) -> Vec<u8> {
    let mut out = vec![2u8];
    out.extend_from_slice(&step.to_le_bytes());
    out.extend_from_slice(&i64::MIN.to_le_bytes());
    out.extend_from_slice(&(positions.len() as u32).to_le_bytes());
    for (name, pos) in positions {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&pos.to_le_bytes());
    }
    out.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for f in files {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f.as_bytes());
    }
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(&[0; 8 * (5 + 11)]);
    out
}

#[test]
fn a_checkpoint_record_of_the_previous_format_reads_with_an_empty_state() {
    for opts in both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        {
            // A directory as the previous version leaves it: its column families and setup,
            // and its checkpoint record in the previous format.
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            commit(&mut s, 1);
            s.finish().unwrap();
        }
        {
            let db =
                rocksdb::DB::open_cf(&rocksdb::Options::default(), dir.path(), ["keys", "meta"])
                    .unwrap();
            let record = format_2_record(
                4,
                &[("kafka/q/0", 17), ("kafka/q/1", 9)],
                &["a.parquet"],
                33,
            );
            let key = [&[0xFFu8; 17][..], b"checkpoint"].concat();
            db.put_cf(db.cf_handle("keys").unwrap(), key, record)
                .unwrap();
        }
        let (checkpoint, _, stats) = StateStore::inspect(dir.path()).unwrap();
        assert_eq!(checkpoint.step, 4);
        assert!(checkpoint.state.is_empty());
        assert_eq!(stats.state_bytes, 0);
        {
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            let c = s.checkpoint();
            assert_eq!(c.step, 4);
            assert_eq!(
                c.positions,
                vec![("kafka/q/0".to_string(), 17), ("kafka/q/1".to_string(), 9)]
            );
            assert_eq!(c.files, vec!["a.parquet"]);
            assert!(c.state.is_empty());
            assert_eq!(s.stats().rows, 33);
            // The next commit writes the new format, state and all.
            commit_state(&mut s, 5, b"first state".to_vec());
            s.finish().unwrap();
        }
        let s = StateStore::open(dir.path(), opts).unwrap();
        assert_eq!(s.checkpoint().step, 5);
        assert_eq!(s.checkpoint().state, b"first state");
        assert_eq!(s.stats().rows, 33);
    }
}

#[test]
fn a_4_mib_state_is_committed_and_read_back() {
    for opts in both_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let big = |step: u64| state_bytes(4 << 20, step);
        {
            let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
            for step in 1..=3 {
                let rows: Vec<_> = (0..1000)
                    .map(|i| (Some("X"), Some(step as i64 * 1000 + i), 0))
                    .collect();
                assert_eq!(kept(&mut s, &batch(&rows)).len(), 1000);
                commit_state(&mut s, step as i64, big(step));
            }
            assert_eq!(s.checkpoint().state, big(3));
            s.finish().unwrap();
        }
        let mut s = StateStore::open(dir.path(), opts.clone()).unwrap();
        assert_eq!(s.checkpoint().step, 3);
        assert!(
            s.checkpoint().state == big(3),
            "the state read back differs"
        );
        assert_eq!(s.stats().state_bytes, 4 << 20);
        if opts.key.is_some() {
            // The keys committed beside the states are all there.
            let rows: Vec<_> = (1000..4000)
                .step_by(3)
                .map(|i| (Some("X"), Some(i), 0))
                .collect();
            assert!(kept(&mut s, &batch(&rows)).is_empty());
        }
        drop(s);
        let (checkpoint, _, stats) = StateStore::inspect(dir.path()).unwrap();
        assert!(checkpoint.state == big(3));
        assert_eq!(stats.state_bytes, 4 << 20);
        assert!(
            stats.to_string().contains("4194304 bytes (4.0 MiB)"),
            "{stats}"
        );
    }
}
