//! The `parquet` and `ipc` sinks with a `'path'` on object storage (a real S3-compatible store,
//! SeaweedFS, started by scripts/test.sh) or as a `file://` URL: exactly-once step files
//! uploaded whole, what a crashed run left deleted at the next start, and a plain file sink
//! uploaded at its end. Objects are read back over object_store, as another reader would.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::common::{s3, s3_store, small_engine};
use arrow::array::AsArray;
use arrow::datatypes::Int64Type;
use futures::TryStreamExt as _;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

fn append(path: &Path, ids: &[i64]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for id in ids {
        writeln!(f, r#"{{"id": {id}}}"#).unwrap();
    }
}

/// A source `s` with state (dedup by id, a step every 5 rows) and a source `t` without.
fn sources(data: &Path, state: &Path) -> String {
    format!(
        "CREATE SOURCE s (id BIGINT) WITH ('connector' = 'file', 'path' = '{0}', \
         'framing' = 'lines', 'encoding' = 'json', 'state.dir' = '{1}', 'dedup.key' = 'id', \
         'commit.interval' = '5 rows');\n\
         CREATE SOURCE t (id BIGINT) WITH ('connector' = 'file', 'path' = '{0}', \
         'framing' = 'lines', 'encoding' = 'json');",
        data.display(),
        state.display()
    )
}

/// How often each id appears in the Parquet objects under `prefix`, and the objects' names.
async fn ids_under(store: &dyn ObjectStore, prefix: &str) -> (BTreeMap<i64, usize>, Vec<String>) {
    let objects: Vec<_> = store
        .list(Some(&ObjectPath::from(prefix)))
        .try_collect()
        .await
        .unwrap();
    let mut ids = BTreeMap::new();
    let mut names = Vec::new();
    for o in objects {
        names.push(o.location.filename().unwrap().to_string());
        let bytes = store.get(&o.location).await.unwrap().bytes().await.unwrap();
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(bytes, 1024).unwrap();
        for b in reader {
            let b = b.unwrap();
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
    names.sort();
    (ids, names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_files_and_a_file_sink_on_s3_hold_each_row_once() {
    let Some((endpoint, key, secret, bucket)) = s3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(&data, &(1..=20).flat_map(|i| [i, i]).collect::<Vec<_>>());
    let prefix = format!("steps-{}", std::process::id());
    std::env::set_var("WEIR_TEST_S3_SECRET_STEPS", &secret);
    let with = format!(
        "'s3.endpoint' = '{endpoint}', 's3.region' = 'us-east-1', 's3.access.key.id' = '{key}', \
         's3.secret.access.key' = '${{env:WEIR_TEST_S3_SECRET_STEPS}}'"
    );
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'parquet', \
         'path' = 's3://{bucket}/{prefix}/steps', {with});\n\
         CREATE SINK one FROM t WITH ('connector' = 'parquet', \
         'path' = 's3://{bucket}/{prefix}/one/all.parquet', {with});",
        sources(&data, &dir.path().join("state"))
    );
    let run = || async {
        let e = small_engine();
        e.query(&script).await.unwrap();
        e.finish().await.unwrap();
    };
    run().await;
    let store = s3_store(&endpoint, &key, &secret, &bucket);
    let (ids, names) = ids_under(store.as_ref(), &format!("{prefix}/steps")).await;
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        (1..=20).collect::<Vec<_>>()
    );
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
    assert!(names.len() >= 4, "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("lake-") && n.ends_with(".parquet")),
        "{names:?}"
    );
    // The stateless file sink: one object with every message (repeats included).
    let (all, names) = ids_under(store.as_ref(), &format!("{prefix}/one")).await;
    assert_eq!(names, ["all.parquet"]);
    assert_eq!(all.values().sum::<usize>(), 40);

    // What a run killed after an upload and before its state commit leaves: the object of a
    // step the state never committed (the second after the last committed one, which the next
    // run, one step long, does not reach: only the start's clean-up can remove it).
    let state = weir_dedup::StateStore::inspect(&dir.path().join("state"))
        .unwrap()
        .0;
    let orphan = format!("{prefix}/steps/lake-{:010}.parquet", state.step + 2);
    store
        .put(
            &ObjectPath::from(orphan.as_str()),
            PutPayload::from_static(b"half a step"),
        )
        .await
        .unwrap();
    append(&data, &[21, 3, 22, 21, 23]);
    run().await;
    let after = weir_dedup::StateStore::inspect(&dir.path().join("state"))
        .unwrap()
        .0;
    assert_eq!(after.step, state.step + 1, "the run was to be one step");
    let (ids, _) = ids_under(store.as_ref(), &format!("{prefix}/steps")).await;
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        (1..=23).collect::<Vec<_>>()
    );
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_urls_are_local_paths_and_a_file_sink_needs_a_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(&data, &[1, 2, 2, 3, 4, 5, 6]);
    let out = dir.path().join("out");
    let script = format!(
        "{}\nCREATE SINK lake FROM s WITH ('connector' = 'ipc', 'path' = 'file://{}');\n\
         CREATE SINK one FROM t WITH ('connector' = 'parquet', 'path' = 'file://{}');",
        sources(&data, &dir.path().join("state")),
        out.join("steps").display(),
        out.join("one.parquet").display()
    );
    let e = small_engine();
    e.query(&script).await.unwrap();
    e.finish().await.unwrap();
    let steps: Vec<_> = std::fs::read_dir(out.join("steps"))
        .unwrap()
        .flatten()
        .collect();
    assert!(!steps.is_empty());
    assert!(steps
        .iter()
        .all(|f| f.file_name().to_string_lossy().ends_with(".arrow")));
    assert!(out.join("one.parquet").is_file());

    // A step file beyond what a crash can leave: the state is not the one these files were
    // written with. Refused, and nothing deleted.
    let committed = weir_dedup::StateStore::inspect(&dir.path().join("state"))
        .unwrap()
        .0
        .step;
    let foreign = out
        .join("steps")
        .join(format!("lake-{:010}.arrow", committed + 3));
    std::fs::write(&foreign, b"another writer's").unwrap();
    let e = small_engine();
    let err = match e.query(&script).await {
        Err(err) => err.to_string(),
        Ok(_) => e.finish().await.unwrap_err().to_string(),
    };
    assert!(
        err.contains("is not the one these files were written with"),
        "{err}"
    );
    assert!(foreign.is_file());
    assert_eq!(
        std::fs::read_dir(out.join("steps")).unwrap().count(),
        steps.len() + 1
    );

    // An object-storage path that names no file, for a sink that writes one.
    let script = format!(
        "{}\nCREATE SINK one FROM t WITH ('connector' = 'parquet', \
         'path' = 's3://some-bucket/dir/', 's3.endpoint' = 'http://127.0.0.1:9', \
         's3.region' = 'us-east-1');",
        sources(&data, &dir.path().join("state-2")),
    );
    let e = small_engine();
    let err = match e.query(&script).await {
        Err(err) => err.to_string(),
        Ok(_) => e.finish().await.unwrap_err().to_string(),
    };
    assert!(
        err.contains("s3://some-bucket/dir/") && err.contains("names a directory"),
        "{err}"
    );
}

/// `count(*)`, `count(DISTINCT id)` and `sum(id)` of the source `q` declared by `source`.
async fn counts(source: &str) -> Result<(i64, i64, i64), weir::EngineError> {
    let batches = small_engine()
        .query(&format!(
            "{source}; SELECT count(*), count(DISTINCT id), sum(id) FROM q"
        ))
        .await?;
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    let col = |i: usize| b.column(i).as_primitive::<Int64Type>().value(0);
    Ok((col(0), col(1), col(2)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_source_reads_objects_as_it_reads_local_files() {
    let Some((endpoint, key, secret, bucket)) = s3() else {
        return;
    };
    let store = s3_store(&endpoint, &key, &secret, &bucket);
    let prefix = format!("source-{}", std::process::id());
    let lines = |ids: std::ops::RangeInclusive<i64>| {
        let mut text = String::new();
        for id in ids {
            text.push_str(&format!("{{\"id\": {id}, \"pad\": \"{:032}\"}}\n", id));
        }
        text
    };
    // a.jsonl is over 8 MiB, so that it is read in several ranges; the directory also holds
    // a hidden object and one the glob does not match.
    let objects = [
        ("in/a.jsonl", lines(1..=200_000)),
        ("in/b.jsonl", lines(200_001..=200_010)),
        ("in/c.txt", lines(500_000..=500_000)),
        ("in/.hidden.jsonl", lines(900_000..=900_000)),
    ];
    assert!(objects[0].1.len() > 8 << 20);
    for (name, text) in objects {
        store
            .put(
                &ObjectPath::from(format!("{prefix}/{name}")),
                PutPayload::from(text.into_bytes()),
            )
            .await
            .unwrap();
    }
    std::env::set_var("WEIR_TEST_S3_SECRET_SOURCE", &secret);
    let with = format!(
        "'s3.endpoint' = '{endpoint}', 's3.region' = 'us-east-1', 's3.access.key.id' = '{key}', \
         's3.secret.access.key' = '${{env:WEIR_TEST_S3_SECRET_SOURCE}}'"
    );
    let source = |path: &str| {
        format!(
            "CREATE SOURCE q (id BIGINT) WITH ('connector' = 'file', 'path' = '{path}', \
             'framing' = 'lines', 'encoding' = 'json', {with})"
        )
    };
    let sum = |ids: std::ops::RangeInclusive<i64>| ids.sum::<i64>();

    // A glob: a.jsonl and b.jsonl, each line once.
    let glob = counts(&source(&format!("s3://{bucket}/{prefix}/in/*.jsonl")))
        .await
        .unwrap();
    assert_eq!(glob, (200_010, 200_010, sum(1..=200_010)));
    // A directory: every object directly in it but the hidden one.
    let all = counts(&source(&format!("s3://{bucket}/{prefix}/in/")))
        .await
        .unwrap();
    assert_eq!(all, (200_011, 200_011, sum(1..=200_010) + 500_000));
    // One object.
    let one = counts(&source(&format!("s3://{bucket}/{prefix}/in/b.jsonl")))
        .await
        .unwrap();
    assert_eq!(one, (10, 10, sum(200_001..=200_010)));

    // A path that names nothing, and a wrong secret: each one line naming the path, never
    // the secret.
    let e = counts(&source(&format!("s3://{bucket}/{prefix}/none/*.jsonl")))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("matches no file") && e.contains("/none/*.jsonl"),
        "{e}"
    );
    std::env::set_var("WEIR_TEST_S3_SECRET_SOURCE", "not-the-secret-at-all");
    let e = counts(&source(&format!("s3://{bucket}/{prefix}/in/")))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("s3://{bucket}/{prefix}/in/")), "{e}");
    assert!(!e.contains("not-the-secret-at-all"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_source_path_refuses_storage_options_and_takes_a_file_url() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("in.jsonl");
    append(&data, &[1, 2, 3]);
    let source = |path: String, extra: &str| {
        format!(
            "CREATE SOURCE q (id BIGINT) WITH ('connector' = 'file', 'path' = '{path}', \
             'framing' = 'lines', 'encoding' = 'json'{extra})"
        )
    };
    let url = format!("file://{}", data.display());
    assert_eq!(counts(&source(url, "")).await.unwrap(), (3, 3, 6));
    let e = counts(&source(
        data.display().to_string(),
        ", 's3.region' = 'us-east-1'",
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("'s3.region'") && e.contains("local path"), "{e}");
}
