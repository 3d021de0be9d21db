//! What the broker tests share: finding the broker, unique topic names, Kafka's Java tools, and
//! reading a topic to the end.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use weir_kafka::{Consumer, ConsumerConfig, PollStatus};

/// The broker's address from `WEIR_KAFKA_BOOTSTRAP` (set by `scripts/test.sh`, which starts a
/// broker with `scripts/kafka.sh`). Without the variable the test is skipped with a notice, so
/// a plain `cargo test` works without Java; with it, an unreachable broker fails the test.
pub fn bootstrap(test: &str) -> Option<String> {
    let Ok(addr) = std::env::var("WEIR_KAFKA_BOOTSTRAP") else {
        // Written to the stderr handle directly: libtest captures eprintln! of passing tests,
        // and a skip must be seen.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "NOTICE: {test} skipped: WEIR_KAFKA_BOOTSTRAP is not set (scripts/test.sh starts a \
             broker and sets it; or run scripts/kafka.sh start and export it yourself)"
        );
        return None;
    };
    let reachable = addr
        .parse()
        .ok()
        .and_then(|sa| std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(5)).ok());
    assert!(
        reachable.is_some(),
        "WEIR_KAFKA_BOOTSTRAP={addr} is set but no broker accepts connections there"
    );
    Some(addr)
}

/// The broker tests run one at a time: together (Java producers, a second broker for the restart
/// test, the secure listeners' tests) they overload a 2-core machine until client timeouts, not
/// weir, decide the outcome.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A topic name no other test (or earlier run against the same broker) uses.
pub fn topic(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{name}-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string()),
    )
    .join("../..")
}

/// Kafka's jars (fetched by `scripts/kafka.sh`).
pub fn classpath() -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/kafka.sh"))
        .arg("classpath")
        .output()
        .expect("run scripts/kafka.sh classpath");
    assert!(out.status.success(), "scripts/kafka.sh classpath failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Runs `tests/java/KafkaLoad.java` (Kafka's own Java producer) with `args`; panics if it fails.
pub fn java_load(args: &[&str]) {
    if let Err(e) = try_java_load(args) {
        panic!("{e}");
    }
}

/// Runs `tests/java/KafkaLoad.java` with `args`. The error carries the tool's output and the
/// tail of the broker's log, so a failure on a CI machine can be told apart from a weir bug.
pub fn try_java_load(args: &[&str]) -> Result<(), String> {
    let src = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string()),
    )
    .join("tests/java/KafkaLoad.java");
    let out = Command::new("java")
        .arg("-Xmx256m")
        .arg("-cp")
        .arg(classpath())
        .arg(src)
        .args(args)
        .output()
        .expect("run java");
    if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok") {
        return Ok(());
    }
    Err(format!(
        "KafkaLoad {args:?} failed:\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        broker_log_tail(60)
    ))
}

/// The last `lines` lines of the test broker's log (`scripts/kafka.sh` keeps it in the data
/// directory named by `$WEIR_KAFKA_RUN/data`), or a note saying why there is none.
pub fn broker_log_tail(lines: usize) -> String {
    let run = std::env::var("WEIR_KAFKA_RUN").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/weir-kafka/run"),
        PathBuf::from,
    );
    let log = std::fs::read_to_string(run.join("data"))
        .map(|d| PathBuf::from(d.trim()).join("server.log"))
        .and_then(|p| std::fs::read_to_string(&p).map(|t| (p, t)));
    match log {
        Ok((path, text)) => {
            let all: Vec<&str> = text.lines().collect();
            let tail = all[all.len().saturating_sub(lines)..].join("\n");
            format!("last {lines} lines of {}:\n{tail}", path.display())
        }
        Err(e) => format!("(no broker log under {}: {e})", run.display()),
    }
}

/// One record, copied out for checking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Polls a bounded consumer to `End`, returning every record by partition.
pub fn drain(consumer: &mut Consumer) -> BTreeMap<i32, Vec<Owned>> {
    let mut out: BTreeMap<i32, Vec<Owned>> = BTreeMap::new();
    let mut idle = 0;
    loop {
        let status = consumer
            .poll(Duration::from_millis(200), |r| {
                out.entry(r.partition).or_default().push(Owned {
                    partition: r.partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    key: r.key.map(<[u8]>::to_vec),
                    value: r.value.map(<[u8]>::to_vec),
                    headers: r
                        .headers()
                        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                        .collect(),
                });
                Ok::<(), std::io::Error>(())
            })
            .expect("poll");
        match status {
            PollStatus::End => return out,
            PollStatus::Idle => {
                idle += 1;
                assert!(idle < 300, "bounded read made no progress for a minute");
            }
            PollStatus::Records(_) => idle = 0,
        }
    }
}

pub fn config(bootstrap: &str, topic: &str) -> ConsumerConfig {
    ConsumerConfig {
        brokers: vec![bootstrap.to_string()],
        topic: topic.to_string(),
        ..ConsumerConfig::default()
    }
}

/// The value KafkaLoad writes for record `i`.
pub fn java_value(i: usize) -> Vec<u8> {
    let mut v = format!("v{i}|").into_bytes();
    v.resize(100, b'.');
    v
}

/// Stops the private broker of a test when the test ends, however it ends.
pub struct PrivateBroker {
    pub run: PathBuf,
}

impl PrivateBroker {
    /// Runs `scripts/kafka.sh CMD` for the broker whose run directory is `run`.
    pub fn kafka_sh(run: &std::path::Path, cmd: &str) -> std::process::Output {
        Self::kafka_sh_with(run, cmd, "")
    }

    /// [`PrivateBroker::kafka_sh`] with `WEIR_KAFKA_FEATURES` set to `features`.
    fn kafka_sh_with(run: &std::path::Path, cmd: &str, features: &str) -> std::process::Output {
        Command::new("bash")
            .arg(repo_root().join("scripts/kafka.sh"))
            .arg(cmd)
            .env("WEIR_KAFKA_RUN", run)
            .env("WEIR_KAFKA_FEATURES", features)
            .output()
            .expect("run scripts/kafka.sh")
    }

    /// Starts a broker of its own; its address.
    pub fn start() -> (Self, String) {
        Self::start_with_features("")
    }

    /// Starts a broker of its own whose storage is formatted with `features` (`name=level`,
    /// space-separated); its address.
    pub fn start_with_features(features: &str) -> (Self, String) {
        let run = std::env::temp_dir().join(topic("weir-kafka-private-run"));
        let mut out = Self::kafka_sh_with(&run, "start", features);
        if !out.status.success() {
            // A JVM start on a loaded machine can fail for reasons of its own: once more,
            // with the first failure shown.
            eprintln!(
                "private broker did not start, starting it again: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Self::kafka_sh(&run, "stop");
            out = Self::kafka_sh_with(&run, "start", features);
        }
        assert!(
            out.status.success(),
            "private broker did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let addr = String::from_utf8(out.stdout).unwrap().trim().to_string();
        (Self { run }, addr)
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        Self::kafka_sh(&self.run, "stop");
        let _ = std::fs::remove_dir_all(&self.run);
    }
}
