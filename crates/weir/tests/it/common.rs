//! What the test modules share: collecting `SELECT` rows, writing generated quotes, the quote
//! schema on disk.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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

/// A broker of this test's own (`scripts/kafka.sh` with another run directory), stopped when
/// the test ends however it ends, so restarting it disturbs no other test.
pub struct PrivateBroker {
    /// Its run directory (data, log, pid).
    pub run: PathBuf,
}

impl PrivateBroker {
    /// Runs `scripts/kafka.sh CMD` on the broker of run directory `run`.
    pub fn kafka_sh(run: &Path, cmd: &str) -> std::process::Output {
        Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka.sh"))
            .arg(cmd)
            .env("WEIR_KAFKA_RUN", run)
            .output()
            .expect("run scripts/kafka.sh")
    }

    /// Starts a broker in `run`; returns it and its bootstrap address.
    pub fn start(run: PathBuf) -> (Self, String) {
        let mut out = Self::kafka_sh(&run, "start");
        if !out.status.success() {
            // A JVM start on a loaded machine can fail for reasons of its own: once more,
            // with the first failure shown.
            eprintln!(
                "the private broker did not start, starting it again: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Self::kafka_sh(&run, "stop");
            out = Self::kafka_sh(&run, "start");
        }
        assert!(
            out.status.success(),
            "the private broker did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bootstrap = String::from_utf8(out.stdout).unwrap().trim().to_string();
        (Self { run }, bootstrap)
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        Self::kafka_sh(&self.run, "stop");
        let _ = std::fs::remove_dir_all(&self.run);
    }
}

/// Stops a `--follow` run as Ctrl-C does and returns its standard error.
pub fn interrupt(mut child: Child, stderr: &Path) -> String {
    let pid = child.id().to_string();
    let ok = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(ok.success());
    let status = child.wait().expect("weir's status");
    let err = std::fs::read_to_string(stderr).unwrap_or_default();
    assert!(status.success(), "weir failed ({status}):\n{err}");
    err
}

/// Runs the weir program with `args`, its standard error into `stderr`.
pub fn spawn(args: &[&str], stderr: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).expect("stderr file"))
        .spawn()
        .expect("weir runs")
}
