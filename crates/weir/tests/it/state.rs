//! Sources with state on the file connector: dedup, exactly-once step files, resume after a
//! restart, and clean-up of what a crashed run left behind. (The kill -9 test against Kafka is
//! scripts/crash_test.sh.)

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use weir::{Engine, EngineOptions};

use crate::common::small_engine;

/// Appends JSON lines `{"id": i, "v": "..."}` for each id.
fn append(path: &Path, ids: &[i64], tag: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for id in ids {
        writeln!(f, r#"{{"id": {id}, "v": "{tag}-{id}"}}"#).unwrap();
    }
}

fn source(data: &Path, state: &Path, extra: &str) -> String {
    format!(
        "CREATE SOURCE s (id BIGINT, v VARCHAR) WITH ('connector' = 'file', 'path' = '{}', \
         'framing' = 'lines', 'encoding' = 'json', 'state.dir' = '{}', 'dedup.key' = 'id'{extra});",
        data.display(),
        state.display()
    )
}

/// Every (id, v) in the parquet files of `dir`, with how often each id appears.
fn read_dir(dir: &Path) -> (BTreeMap<i64, usize>, Vec<String>) {
    let mut ids = BTreeMap::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in &names {
        if !name.ends_with(".parquet") || name.starts_with('.') {
            continue;
        }
        let f = std::fs::File::open(dir.join(name)).unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(f, 1024).unwrap();
        for b in reader {
            let b: RecordBatch = b.unwrap();
            for id in b.column(0).as_primitive::<Int64Type>().values() {
                *ids.entry(*id).or_insert(0) += 1;
            }
        }
    }
    (ids, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_from_a_source_with_state_writes_each_key_once_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let state = dir.path().join("state");
    let out = dir.path().join("out");
    // 1..=20 with every third id twice.
    let first: Vec<i64> = (1..=20)
        .flat_map(|i| if i % 3 == 0 { vec![i, i] } else { vec![i] })
        .collect();
    append(&data, &first, "a");
    let script = format!(
        // `FROM S`: unquoted names are lower-cased, so this is the source `s`.
        "{}\nCREATE SINK out FROM S WITH ('connector' = 'parquet', 'path' = '{}');",
        source(&data, &state, ", 'commit.interval' = '5 rows'"),
        out.display()
    );
    let e = small_engine();
    e.query(&script).await.unwrap();
    let reports = e.finish().await.unwrap();
    assert_eq!(reports[0].rows, 20);
    let (ids, names) = read_dir(&out);
    assert_eq!(ids.len(), 20);
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
    // 26 messages at 5 a step: several steps, each its own file.
    assert!(names.len() >= 4, "{names:?}");
    let st = &e.state_reports()[0].1;
    assert_eq!(st.duplicates_dropped, 6);

    // A crashed run left a temporary file and a renamed file whose commit never happened (the
    // second step after the last committed one: the commit of a step waits for the one before).
    let committed = weir_dedup::StateStore::inspect(&state).unwrap().0.step;
    let uncommitted = format!("{:010}", committed + 2);
    std::fs::write(out.join(format!(".out-{uncommitted}.parquet.tmp")), b"half").unwrap();
    std::fs::write(
        out.join(format!("out-{uncommitted}.parquet")),
        b"uncommitted",
    )
    .unwrap();
    // New messages: repeats of old ids (dropped by the state) and new ids.
    append(&data, &[5, 21, 22, 6, 22, 23], "b");
    let e = small_engine();
    e.query(&script).await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 3);
    let (ids, names) = read_dir(&out);
    assert!(!names.iter().any(|n| n.contains(&uncommitted)), "{names:?}");
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        (1..=23).collect::<Vec<_>>()
    );
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");

    // Nothing new: a third run writes nothing and keeps everything.
    let e = small_engine();
    e.query(&script).await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 0);
    assert_eq!(read_dir(&out).0.len(), 23);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_on_a_source_with_state_see_new_distinct_rows_only() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let state = dir.path().join("state");
    append(&data, &[1, 2, 2, 3, 1, 4], "a");
    let script = format!(
        "{}\nSELECT count(*) AS n, sum(id) AS s FROM s;",
        source(&data, &state, "")
    );
    let count = |b: &[RecordBatch]| {
        (
            b[0].column(0).as_primitive::<Int64Type>().value(0),
            b[0].column(1)
                .as_primitive::<Int64Type>()
                .values()
                .first()
                .copied(),
        )
    };
    let b = small_engine().query(&script).await.unwrap();
    assert_eq!(count(&b), (4, Some(10)));
    append(&data, &[4, 5, 1, 6], "b");
    // Resumes after the rows the first run read, and remembers their keys.
    let b = small_engine().query(&script).await.unwrap();
    assert_eq!(count(&b), (2, Some(11)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_options_are_checked_at_create_source() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(&data, &[1], "a");
    let state = dir.path().join("state");
    let cases = [
        (
            source(&data, &state, ", 'dedup.hash' = 'md5'"),
            "'dedup.hash' = 'md5'",
        ),
        (
            source(&data, &state, ", 'dedup.ttl' = '1h'"),
            "'dedup.time_column' and 'dedup.ttl' go together",
        ),
        (
            source(&data, &state, ", 'commit.interval' = 'often'"),
            "'commit.interval'",
        ),
        (
            source(&data, &state, "").replace("'dedup.key' = 'id'", "'dedup.key' = 'nope'"),
            "'nope' is not a column",
        ),
        (
            source(&data, &state, "")
                .replace(&format!("'state.dir' = '{}', ", state.display()), ""),
            "'dedup.key' needs 'state.dir'",
        ),
    ];
    for (script, want) in cases {
        let e = small_engine().query(&script).await.unwrap_err().to_string();
        assert!(e.contains(want), "{e} should mention {want}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_mode_commits_steps_by_time_and_ends_on_stop() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let state = dir.path().join("state");
    let out = dir.path().join("out");
    append(&data, &[1, 2, 3, 2], "a");
    let e = Engine::new(EngineOptions {
        follow: true,
        partitions: 1,
        batch_size: 2,
        ..EngineOptions::default()
    });
    let script = format!(
        "{}\nCREATE SINK out FROM s WITH ('connector' = 'parquet', 'path' = '{}');",
        source(&data, &state, ", 'commit.interval' = '100ms'"),
        out.display()
    );
    e.query(&script).await.unwrap();
    assert!(e.pipelines_running());
    // Committed files appear while the pipeline runs: steps end by time.
    let wait_for = |n: usize| {
        let out = out.clone();
        async move {
            for _ in 0..200 {
                if out.exists() && read_dir(&out).0.len() >= n {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("never saw {n} ids committed");
        }
    };
    wait_for(3).await;
    append(&data, &[3, 4, 5, 1], "b");
    wait_for(5).await;
    e.stop();
    e.wait().await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 5);
    let (ids, names) = read_dir(&out);
    assert_eq!(ids.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_message_stops_the_sink_with_every_committed_step_matching_its_position() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let state = dir.path().join("state");
    let out = dir.path().join("out");
    append(&data, &(1..=12).collect::<Vec<_>>(), "a");
    let bad_at = std::fs::metadata(&data).unwrap().len();
    let bad = "{\"id\": oops}\n";
    std::fs::OpenOptions::new()
        .append(true)
        .open(&data)
        .unwrap()
        .write_all(bad.as_bytes())
        .unwrap();
    append(&data, &(13..=20).collect::<Vec<_>>(), "b");
    let script = format!(
        "{}\nCREATE SINK out FROM s WITH ('connector' = 'parquet', 'path' = '{}');",
        source(&data, &state, ", 'commit.interval' = '5 rows'"),
        out.display()
    );
    let err = small_engine().query(&script).await.unwrap_err().to_string();
    assert!(
        err.contains("in.jsonl") && err.contains(&bad_at.to_string()),
        "the error names the file and the bad message's offset {bad_at}: {err}"
    );
    // What was committed is a prefix of the good rows, once each, and the committed position
    // is exactly where that prefix ends: the reading thread ran ahead, but a commit records
    // only what was written.
    let (ids, _) = read_dir(&out);
    let k = ids.len() as i64;
    assert!((1..=12).contains(&k), "{ids:?}");
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        (1..=k).collect::<Vec<_>>()
    );
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
    let line = |i: i64| format!("{{\"id\": {i}, \"v\": \"a-{i}\"}}\n").len() as i64;
    let end_of_prefix: i64 = (1..=k).map(line).sum();
    let (checkpoint, _, _) = weir_dedup::StateStore::inspect(&state).unwrap();
    let positions: Vec<i64> = checkpoint.positions.iter().map(|(_, p)| *p).collect();
    assert_eq!(positions, vec![end_of_prefix], "{:?}", checkpoint.positions);

    // The bad line fixed in place (same length): the next run goes on from the position and
    // ends with every id once.
    let mut text = std::fs::read_to_string(&data).unwrap();
    let fixed = format!("{:<width$}\n", "{\"id\": 99}", width = bad.len() - 1);
    text.replace_range(bad_at as usize..bad_at as usize + bad.len(), &fixed);
    std::fs::write(&data, text).unwrap();
    let e = small_engine();
    e.query(&script).await.unwrap();
    e.finish().await.unwrap();
    let (ids, _) = read_dir(&out);
    let mut expected: Vec<i64> = (1..=20).collect();
    expected.push(99);
    assert_eq!(ids.keys().copied().collect::<Vec<_>>(), expected);
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
}
