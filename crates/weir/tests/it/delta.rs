//! The `delta` sink: exactly-once steps into a Delta Lake table on the local filesystem and on a
//! real S3-compatible object store (SeaweedFS, started by scripts/test.sh, whose address comes in
//! WEIR_S3_ENDPOINT). Tables are read back with delta-rs, as another engine would; the Python
//! `deltalake` reader checks them again in scripts/delta_check.sh, and the kill -9 test is
//! scripts/crash_test.sh with WEIR_CRASH_SINK=delta.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::common::{s3, s3_store, small_engine};
use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Int64Type;
use deltalake_core::DeltaTable;
use futures::StreamExt as _;
use object_store::ObjectStoreExt as _;

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

fn source(data: &Path, state: &Path) -> String {
    format!(
        "CREATE SOURCE s (id BIGINT, v VARCHAR) WITH ('connector' = 'file', 'path' = '{}', \
         'framing' = 'lines', 'encoding' = 'json', 'state.dir' = '{}', 'dedup.key' = 'id', \
         'commit.interval' = '5 rows');",
        data.display(),
        state.display()
    )
}

/// A local table, loaded as any delta-rs user would.
async fn load(dir: &Path) -> DeltaTable {
    let url = url::Url::from_directory_path(dir).unwrap();
    deltalake_core::open_table(url).await.unwrap()
}

/// The rows of a local table's current snapshot, file by file.
pub(crate) fn table_batches(table: &DeltaTable) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for uri in table.get_file_uris().unwrap() {
        let path = match url::Url::parse(&uri) {
            Ok(u) => u.to_file_path().unwrap(),
            Err(_) => std::path::PathBuf::from(&uri),
        };
        let f = std::fs::File::open(path).unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(f, 8192).unwrap();
        out.extend(reader.map(|b| b.unwrap()));
    }
    out
}

/// How often each id appears in the table's current snapshot.
async fn ids(table: &DeltaTable) -> BTreeMap<i64, usize> {
    let mut ids = BTreeMap::new();
    for b in table_batches(table) {
        let col = b.column_by_name("id").unwrap();
        for id in col.as_primitive::<Int64Type>().values() {
            *ids.entry(*id).or_insert(0) += 1;
        }
    }
    ids
}

async fn txn(table: &DeltaTable, app: &str) -> Option<i64> {
    table
        .snapshot()
        .unwrap()
        .transaction_version(table.log_store().as_ref(), app)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_sink_holds_each_key_once_and_its_positions_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let state = dir.path().join("state");
    let table_dir = dir.path().join("table");
    let first: Vec<i64> = (1..=20)
        .flat_map(|i| if i % 3 == 0 { vec![i, i] } else { vec![i] })
        .collect();
    append(&data, &first, "a");
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
         'partition.by' = 'v');",
        source(&data, &state),
        table_dir.display()
    );
    let e = small_engine();
    e.query(&script).await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 20);
    let table = load(&table_dir).await;
    let got = ids(&table).await;
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    let steps = txn(&table, "lake").await.unwrap();
    assert!(steps >= 4, "26 messages at 5 a step: {steps} steps");
    // The table says how far the source is: 26 lines read, as the state says too.
    let positions = weir_state_positions(&state);
    assert!(!positions.is_empty());
    for (name, next) in &positions {
        assert_eq!(
            txn(&table, &format!("lake/{name}")).await,
            Some(*next),
            "{name}"
        );
    }
    // Partitioned by v: a directory per value.
    assert!(table_dir.join("v=a-1").is_dir());

    // More rows, repeats dropped by the state; nothing new: no new version.
    append(&data, &[5, 21, 22, 6, 22, 23], "b");
    let e = small_engine();
    e.query(&script).await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 3);
    let table = load(&table_dir).await;
    let got = ids(&table).await;
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        (1..=23).collect::<Vec<_>>()
    );
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    let version = table.version();
    let e = small_engine();
    e.query(&script).await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 0);
    assert_eq!(load(&table_dir).await.version(), version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_state_resumes_from_the_positions_in_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let table_dir = dir.path().join("table");
    append(&data, &(1..=12).collect::<Vec<_>>(), "a");
    // No 'state.dir': the table's own log keeps the positions.
    let script = format!(
        "CREATE SOURCE s (id BIGINT, v VARCHAR) WITH ('connector' = 'file', 'path' = '{}', \
         'framing' = 'lines', 'encoding' = 'json', 'commit.interval' = '5 rows');\n\
         CREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}');",
        data.display(),
        table_dir.display()
    );
    let run = || async {
        let e = small_engine();
        e.query(&script).await.unwrap();
        e.finish().await.unwrap()[0].rows
    };
    assert_eq!(run().await, 12);
    let table = load(&table_dir).await;
    let steps = txn(&table, "lake").await.unwrap();
    assert!(steps >= 2, "12 rows in steps of at least 5: {steps} steps");
    // The last commit names the source's position, at its txn version: 12 lines read.
    let info = table.history(Some(1)).next().await.unwrap().unwrap();
    let positions = info.info["weir.positions"].as_object().unwrap().clone();
    assert_eq!(positions.len(), 1, "{positions:?}");
    for (name, next) in &positions {
        assert_eq!(txn(&table, &format!("lake/{name}")).await, next.as_i64());
    }

    // The next run reads only what came after, and a run with nothing new commits nothing.
    append(&data, &(13..=18).collect::<Vec<_>>(), "b");
    assert_eq!(run().await, 6);
    let version = load(&table_dir).await.version();
    assert_eq!(run().await, 0);
    assert_eq!(load(&table_dir).await.version(), version);

    // A stop after a step's files were written but before its commit (the commit removed):
    // the next run reads that step's rows again from the table's positions, once.
    let last = version.unwrap();
    std::fs::remove_file(table_dir.join(format!("_delta_log/{last:020}.json"))).unwrap();
    let behind = ids(&load(&table_dir).await).await.len();
    assert!(behind < 18, "{behind}");
    assert_eq!(run().await as usize, 18 - behind);
    let got = ids(&load(&table_dir).await).await;
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        (1..=18).collect::<Vec<_>>()
    );
    assert!(got.values().all(|&n| n == 1), "{got:?}");
}

/// Data files in the table's current snapshot.
fn files(table: &DeltaTable) -> usize {
    table.get_file_uris().unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_files_are_compacted_by_the_sink_and_by_weir_compact() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(&data, &(1..=40).collect::<Vec<_>>(), "a");
    let run = |table: &Path, state: &str, compaction: &str| {
        let script = format!(
            "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
             'compaction.interval' = '{compaction}');",
            source(&data, &dir.path().join(state)),
            table.display()
        );
        async move {
            let e = small_engine();
            e.query(&script).await.unwrap();
            e.finish().await.unwrap();
        }
    };
    // Compaction off: a file a step.
    let plain = dir.path().join("plain");
    run(&plain, "state-plain", "0").await;
    let table = load(&plain).await;
    let steps = txn(&table, "lake").await.unwrap();
    assert!(steps >= 5, "{steps} steps");
    assert_eq!(files(&table), steps as usize);

    // Every 3 commits: the files of those steps become one.
    let compacted = dir.path().join("compacted");
    run(&compacted, "state-compacted", "3").await;
    let table = load(&compacted).await;
    assert_eq!(txn(&table, "lake").await, Some(steps));
    assert!(files(&table) < steps as usize, "{} files", files(&table));
    let ops: Vec<String> = table
        .history(None)
        .map(|i| i.unwrap().operation.unwrap_or_default())
        .collect()
        .await;
    assert!(ops.iter().any(|o| o == "OPTIMIZE"), "{ops:?}");
    let got = ids(&table).await;
    assert_eq!(got.len(), 40);
    assert!(got.values().all(|&n| n == 1), "{got:?}");

    // `weir compact` on the table made without: one file, the same rows, the same txn versions.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["compact", plain.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("{steps} files")), "{stdout}");
    let table = load(&plain).await;
    assert_eq!(files(&table), 1);
    assert_eq!(txn(&table, "lake").await, Some(steps));
    let got = ids(&table).await;
    assert_eq!(got.len(), 40);
    assert!(got.values().all(|&n| n == 1), "{got:?}");
    // The writer goes on after it: the state and the table still agree.
    append(&data, &[41, 42, 3], "b");
    run(&plain, "state-plain", "0").await;
    let table = load(&plain).await;
    assert_eq!(ids(&table).await.len(), 42);

    // Unknown options are named, values never shown.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "compact",
            plain.to_str().unwrap(),
            "--option",
            "s3.secret=hunter2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("s3.secret") && !stderr.contains("hunter2"),
        "{stderr}"
    );
}

/// Compaction keeps each partition's rows in their partition: the small files of a table
/// partitioned by `v` (`even` or `odd`) become fewer, each file's `v` is still that of its
/// rows, and every id is there once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_packs_each_partition_apart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let mut lines = String::new();
    for id in 1..=40 {
        let half = if id % 2 == 0 { "even" } else { "odd" };
        lines.push_str(&format!("{{\"id\": {id}, \"v\": \"{half}\"}}\n"));
    }
    std::fs::write(&data, lines).unwrap();
    let table_dir = dir.path().join("table");
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
         'partition.by' = 'v', \
         'compaction.interval' = '4');",
        source(&data, &dir.path().join("state")),
        table_dir.display()
    );
    let e = small_engine();
    e.query(&script).await.unwrap();
    e.finish().await.unwrap();
    let table = load(&table_dir).await;
    let steps = txn(&table, "lake").await.unwrap();
    // Two files a step (one per partition) without compaction.
    assert!(
        files(&table) < 2 * steps as usize,
        "{} files",
        files(&table)
    );
    let mut views = table
        .snapshot()
        .unwrap()
        .snapshot()
        .file_views(table.log_store().as_ref(), None);
    let mut seen = BTreeMap::new();
    while let Some(view) = views.next().await {
        let view = view.unwrap();
        let half = match view.partition_values_map()["v"].as_deref() {
            Some("even") => 0,
            Some("odd") => 1,
            other => panic!("partition value {other:?}"),
        };
        let path = table_dir.join(&*view.path());
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
            std::fs::File::open(&path).unwrap(),
            1024,
        )
        .unwrap();
        for b in reader {
            let b = b.unwrap();
            assert!(b.column_by_name("v").is_none(), "{}", path.display());
            for id in b
                .column_by_name("id")
                .unwrap()
                .as_primitive::<Int64Type>()
                .values()
            {
                assert_eq!(id % 2, half, "{}", path.display());
                *seen.entry(*id).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(seen.len(), 40);
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
}

/// The positions the state directory committed, through `weir stats`'s library call.
fn weir_state_positions(state: &Path) -> Vec<(String, i64)> {
    let (checkpoint, _, _) = weir_dedup::StateStore::inspect(state).unwrap();
    checkpoint.positions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_committed_to_the_state_but_not_the_table_is_settled_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let state = dir.path().join("state");
    let table_dir = dir.path().join("table");
    append(&data, &(1..=12).collect::<Vec<_>>(), "a");
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
         'checkpoint.interval' = '1000');",
        source(&data, &state),
        table_dir.display()
    );
    let e = small_engine();
    e.query(&script).await.unwrap();
    e.finish().await.unwrap();
    let table = load(&table_dir).await;
    let last = table.version().unwrap();
    let steps = txn(&table, "lake").await.unwrap();
    // A stop between the two commits: the table's last commit never happened.
    std::fs::remove_file(table_dir.join(format!("_delta_log/{last:020}.json"))).unwrap();
    let behind = load(&table_dir).await;
    assert_eq!(txn(&behind, "lake").await, Some(steps - 1));
    assert!(ids(&behind).await.len() < 12);
    // The next start commits the recorded step, and nothing is lost or doubled.
    let e = small_engine();
    e.query(&script).await.unwrap();
    e.finish().await.unwrap();
    let table = load(&table_dir).await;
    assert_eq!(txn(&table, "lake").await, Some(steps));
    let got = ids(&table).await;
    assert_eq!(
        got.keys().copied().collect::<Vec<_>>(),
        (1..=12).collect::<Vec<_>>()
    );
    assert!(got.values().all(|&n| n == 1), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_with_a_stale_view_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let table_dir = dir.path().join("table");
    append(&data, &(1..=12).collect::<Vec<_>>(), "a");
    let sink = format!(
        "CREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}');",
        table_dir.display()
    );
    let first = format!("{}\n{sink}", source(&data, &dir.path().join("state-1")));
    let e = small_engine();
    e.query(&first).await.unwrap();
    e.finish().await.unwrap();
    let version = load(&table_dir).await.version();
    // Another process with the same app id but its own (empty) state: a zombie's view.
    let second = format!("{}\n{sink}", source(&data, &dir.path().join("state-2")));
    let e = small_engine();
    let err = match e.query(&second).await {
        Err(err) => err.to_string(),
        Ok(_) => e.finish().await.unwrap_err().to_string(),
    };
    assert!(
        err.contains("already holds step") && err.contains("'lake'"),
        "{err}"
    );
    let table = load(&table_dir).await;
    assert_eq!(table.version(), version, "the stale writer committed");
    assert!(ids(&table).await.values().all(|&n| n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_differences_are_named_and_new_columns_can_be_added() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    let table_dir = dir.path().join("table");
    append(&data, &[1, 2, 3], "a");
    let run = |state: &str, columns: &str, extra: &str| {
        format!(
            "CREATE SOURCE s ({columns}) WITH ('connector' = 'file', 'path' = '{}', \
             'framing' = 'lines', 'encoding' = 'json', 'state.dir' = '{}');\n\
             CREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
             'app.id' = '{state}'{extra});",
            data.display(),
            dir.path().join(state).display(),
            table_dir.display()
        )
    };
    let e = small_engine();
    e.query(&run("a", "id BIGINT", "")).await.unwrap();
    e.finish().await.unwrap();
    // Another type for id, and a new column: both named.
    let err = small_engine()
        .query(&run("b", "id VARCHAR, v VARCHAR", ""))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'id' is long in the table, string in the query"),
        "{err}"
    );
    assert!(
        err.contains("'v' (string) is in the query, not in the table"),
        "{err}"
    );
    // The new column, allowed: added, and the old rows read it as null.
    let e = small_engine();
    e.query(&run(
        "c",
        "id BIGINT, v VARCHAR",
        ", 'schema.evolution' = 'add_columns'",
    ))
    .await
    .unwrap();
    e.finish().await.unwrap();
    let table = load(&table_dir).await;
    let fields: Vec<String> = table
        .snapshot()
        .unwrap()
        .schema()
        .fields()
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(fields, ["id", "v"]);
    assert_eq!(ids(&table).await.values().sum::<usize>(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_not_a_table_and_a_query_without_state_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(&data, &[1, 2], "a");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"not a table").unwrap();
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}');",
        source(&data, &dir.path().join("state")),
        other.display()
    );
    let err = small_engine().query(&script).await.unwrap_err().to_string();
    assert!(
        err.contains("is not a Delta table") && err.contains("notes.txt"),
        "{err}"
    );

    // A query (not the source itself) over a source without state has no positions to keep.
    let script = format!(
        "CREATE SOURCE s (id BIGINT) WITH ('connector' = 'file', 'path' = '{}', \
         'framing' = 'lines', 'encoding' = 'json');\n\
         CREATE SINK lake FROM (SELECT id * 2 AS twice FROM s) WITH ('connector' = 'delta', \
         'path' = '{}');",
        data.display(),
        dir.path().join("t2").display()
    );
    let e = small_engine();
    let err = match e.query(&script).await {
        Err(err) => err.to_string(),
        Ok(_) => e.finish().await.unwrap_err().to_string(),
    };
    assert!(err.contains("'state.dir'"), "{err}");
    // Nor may a source without state take the dedup options.
    let script = format!(
        "CREATE SOURCE s (id BIGINT) WITH ('connector' = 'file', 'path' = '{}', \
         'framing' = 'lines', 'encoding' = 'json', 'dedup.key' = 'id');",
        data.display(),
    );
    let err = small_engine().query(&script).await.unwrap_err().to_string();
    assert!(err.contains("'dedup.key' needs 'state.dir'"), "{err}");

    // Options are checked at CREATE SINK.
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
         'checkpoint.interval' = '0', 's3.bogus' = 'x');",
        source(&data, &dir.path().join("state-3")),
        dir.path().join("t3").display()
    );
    let err = small_engine().query(&script).await.unwrap_err().to_string();
    assert!(err.contains("s3.bogus"), "{err}");
    // No thread to write the files is no sink.
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{}', \
         'sink.parallelism' = '0');",
        source(&data, &dir.path().join("state-4")),
        dir.path().join("t4").display()
    );
    let e = small_engine();
    let err = match e.query(&script).await {
        Err(err) => err.to_string(),
        Ok(_) => e.finish().await.unwrap_err().to_string(),
    };
    assert!(
        err.contains("sink.parallelism") && err.contains("positive"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_table_on_s3_is_written_exactly_once_and_faults_are_named() {
    let Some((endpoint, key, secret, bucket)) = s3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(
        &data,
        &(1..=15).flat_map(|i| [i, i]).collect::<Vec<_>>(),
        "a",
    );
    let prefix = format!("it-{}", std::process::id());
    std::env::set_var("WEIR_TEST_S3_SECRET", &secret);
    let sink = |path: &str, secret_ref: &str| {
        format!(
            "CREATE SINK lake FROM s WITH ('connector' = 'delta', 'path' = '{path}', \
             's3.endpoint' = '{endpoint}', 's3.region' = 'us-east-1', \
             's3.access.key.id' = '{key}', 's3.secret.access.key' = '{secret_ref}', \
             'storage.max.retries' = '1', 'storage.retry.timeout' = '2s');"
        )
    };
    let table = format!("s3://{bucket}/{prefix}/quotes");
    let script = format!(
        "{}\n{}",
        source(&data, &dir.path().join("state")),
        sink(&table, "${env:WEIR_TEST_S3_SECRET}")
    );
    let e = small_engine();
    e.query(&script).await.unwrap();
    assert_eq!(e.finish().await.unwrap()[0].rows, 15);

    // Read back with delta-rs over the same store.
    let store = s3_store(&endpoint, &key, &secret, &bucket);
    let log = object_store::path::Path::from(format!("{prefix}/quotes/_delta_log"));
    let commits = {
        use futures::TryStreamExt;
        store
            .list(Some(&log))
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
    };
    assert!(commits.len() >= 3, "{commits:?}");
    // The rows, through the table's add actions.
    let mut rows = 0usize;
    let mut ids = BTreeMap::new();
    for c in &commits {
        if !c.location.as_ref().ends_with(".json") {
            continue;
        }
        let text = store.get(&c.location).await.unwrap().bytes().await.unwrap();
        for line in std::str::from_utf8(&text).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(add) = v.get("add") {
                let path = object_store::path::Path::from(format!(
                    "{prefix}/quotes/{}",
                    add["path"].as_str().unwrap()
                ));
                let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024)
                        .unwrap();
                for b in reader {
                    let b = b.unwrap();
                    rows += b.num_rows();
                    for id in b
                        .column_by_name("id")
                        .unwrap()
                        .as_primitive::<Int64Type>()
                        .values()
                    {
                        *ids.entry(*id).or_insert(0usize) += 1;
                    }
                }
            }
        }
    }
    assert_eq!(rows, 15);
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");

    // A wrong secret: one line naming the table, without the secret.
    let script = format!(
        "{}\n{}",
        source(&data, &dir.path().join("state-bad")),
        sink(
            &format!("s3://{bucket}/{prefix}/other"),
            "wrong-secret-value"
        )
    );
    let err = small_engine().query(&script).await.unwrap_err().to_string();
    assert!(
        err.contains(&format!("s3://{bucket}/{prefix}/other")),
        "{err}"
    );
    assert!(
        !err.contains("wrong-secret-value") && !err.contains(&secret),
        "{err}"
    );
    // A bucket that does not exist.
    let script = format!(
        "{}\n{}",
        source(&data, &dir.path().join("state-nobucket")),
        sink("s3://no-such-bucket-weir/t", "${env:WEIR_TEST_S3_SECRET}")
    );
    let err = small_engine().query(&script).await.unwrap_err().to_string();
    assert!(err.contains("no-such-bucket-weir"), "{err}");
    assert!(!err.contains(&secret), "{err}");
}
