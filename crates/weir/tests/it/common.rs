//! What the test modules share: collecting `SELECT` rows, writing generated quotes, the quote
//! schema on disk.

use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use weir::{Engine, EngineOptions, ResultOutput, SinkError};
use weir_codec::Framing;
use weir_testdata::{QuoteFormat, QuoteGenerator, STOCKS_PROTO};

/// Collects the rows of every `SELECT`, and counts the statements that printed.
#[derive(Default)]
pub struct Collect {
    pub batches: Vec<RecordBatch>,
    pub statements: usize,
}

impl ResultOutput for Collect {
    fn begin(&mut self, _schema: &SchemaRef) -> Result<(), SinkError> {
        self.statements += 1;
        Ok(())
    }
    fn batch(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        self.batches.push(batch.clone());
        Ok(())
    }
    fn end(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Writes `n` quotes of `seed` to `path`.
pub fn write_quotes(path: &Path, n: u64, seed: u64, format: QuoteFormat, framing: Framing) {
    let mut f = std::fs::File::create(path).unwrap();
    QuoteGenerator::new(seed)
        .write(&mut f, n, format, framing)
        .unwrap();
}

/// Writes `stocks.proto` and its descriptor set `stocks.pb` into `dir`; returns the `.pb`.
pub fn write_schema(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("stocks.proto"), STOCKS_PROTO).unwrap();
    let set = weir_codec::ProtoSchema::load(dir.join("stocks.proto"), &[])
        .unwrap()
        .descriptor_set_bytes();
    let pb = dir.join("stocks.pb");
    std::fs::write(&pb, set).unwrap();
    pb
}

/// The rows of some batches.
pub fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

/// The S3-compatible store the test command starts, or `None` (with a notice) outside it.
pub fn s3() -> Option<(String, String, String, String)> {
    match (
        std::env::var("WEIR_S3_ENDPOINT"),
        std::env::var("WEIR_S3_ACCESS_KEY"),
        std::env::var("WEIR_S3_SECRET_KEY"),
        std::env::var("WEIR_S3_BUCKET"),
    ) {
        (Ok(e), Ok(k), Ok(s), Ok(b)) => Some((e, k, s, b)),
        _ => {
            assert!(
                std::env::var("CI").is_err(),
                "WEIR_S3_ENDPOINT is not set under CI: scripts/test.sh starts the object store"
            );
            eprintln!("NOTICE: WEIR_S3_ENDPOINT unset; the S3 tests did not run (scripts/test.sh sets it)");
            None
        }
    }
}

/// An engine with 2 partitions and batches of 4 rows, so that small inputs still make several
/// batches and steps.
pub fn small_engine() -> Engine {
    Engine::new(EngineOptions {
        partitions: 2,
        batch_size: 4,
        ..EngineOptions::default()
    })
}

/// A client of the test command's S3-compatible store, rooted at `bucket`, to read back what
/// weir wrote (or put what it reads), as another program would.
pub fn s3_store(
    endpoint: &str,
    key: &str,
    secret: &str,
    bucket: &str,
) -> std::sync::Arc<dyn object_store::ObjectStore> {
    std::sync::Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .build()
            .unwrap(),
    )
}
