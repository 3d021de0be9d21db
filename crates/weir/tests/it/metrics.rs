//! `weir run --metrics-addr`: the endpoints of a real run, its series against what was read,
//! the end-of-run summary and `weir stats` against the last scrape, the Grafana dashboard's
//! queries against the series a run exports, and a real Prometheus scraping a `--follow` run
//! on the local broker (the test command starts both; without them those parts are skipped
//! with a NOTICE, and fail when set but unreachable).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use weir_codec::Framing;
use weir_testdata::QuoteFormat;

use crate::common::{interrupt, spawn, write_quotes, write_schema, PrivateBroker};

/// A secret set as an option value: it must appear in no log line.
const SECRET: &str = "hunter2-weir-secret";

/// A generous deadline for a run to catch up (no timing is asserted).
const DEADLINE: Duration = Duration::from_secs(180);

pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `GET http://addr/path`: the status and the body (HTTP/1.0, read to the end).
fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// A sample of an exposition: name, labels, value.
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: Vec<(String, String)>,
    pub(crate) value: f64,
}

pub(crate) fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .filter_map(|p| {
                    let (k, v) = p.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            Some(Sample {
                name: name.to_string(),
                labels,
                value: value.parse().ok()?,
            })
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include `with`.
pub(crate) fn sum(samples: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
        })
        .map(|s| s.value)
        .sum()
}

fn count(samples: &[Sample], name: &str) -> usize {
    samples.iter().filter(|s| s.name == name).count()
}

/// Scrapes `addr` until `done` holds (or the deadline passes: then the last scrape is shown).
pub(crate) fn scrape_until(
    addr: &str,
    child: &mut Child,
    done: impl Fn(&[Sample]) -> bool,
) -> String {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < DEADLINE {
        if let Some(status) = child.try_wait().expect("weir's status") {
            panic!("weir exited early ({status}); last scrape:\n{last}");
        }
        if let Ok((200, body)) = get(addr, "/metrics") {
            if done(&samples(&body)) {
                return body;
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the run did not get there within {DEADLINE:?}; last scrape:\n{last}");
}

/// A figure of the summary or of `weir stats`: the number after `label` on its line.
fn figure(text: &str, label: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no '{label}' line in:\n{text}"));
    let rest = &line.trim_start()[label.len()..];
    rest.split_whitespace()
        .next()
        .map(|w| w.replace(',', ""))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number after '{label}' in '{line}'"))
}

/// Checks that the summary of a stopped run, `weir stats` of its state directory and the
/// run's last scrape show the same figures.
fn same_figures(scrape: &[Sample], summary: &str, state_dir: &Path, source: &str, sink: &str) {
    let q = [("source", source)];
    let messages = sum(scrape, "weir_source_messages_total", &q) as u64;
    assert_eq!(
        figure(summary, &format!("source {source}:")),
        messages,
        "{summary}"
    );
    let stats = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["stats", &state_dir.display().to_string()])
        .output()
        .expect("weir stats");
    assert!(stats.status.success(), "{stats:?}");
    let stats = String::from_utf8_lossy(&stats.stdout);
    for (label, series) in [
        ("steps committed:", "weir_state_step"),
        ("rows checked:", "weir_dedup_rows_checked_total"),
        ("duplicates dropped:", "weir_dedup_duplicates_dropped_total"),
        ("keys written:", "weir_dedup_keys_written_total"),
        ("keys held (estimate):", "weir_dedup_keys"),
    ] {
        let m = sum(scrape, series, &q) as u64;
        if series == "weir_dedup_keys" {
            // RocksDB's estimate moves as memtables flush and files compact, and the scrape,
            // the summary and `weir stats` read it at different moments: they agree roughly
            // (an unset gauge reads 0, far outside this).
            let written = figure(&stats, "keys written:");
            for (what, v) in [
                ("scrape", m),
                ("summary", figure(summary, label)),
                ("weir stats", figure(&stats, label)),
            ] {
                assert!(
                    v * 10 >= written * 7 && v * 10 <= written * 13,
                    "{what}: {v} keys held against {written} written\n{stats}"
                );
            }
            continue;
        }
        assert_eq!(figure(&stats, label), m, "weir stats, {label}\n{stats}");
        assert_eq!(figure(summary, label), m, "summary, {label}\n{summary}");
    }
    let rows = sum(scrape, "weir_sink_rows_total", &[("sink", sink)]) as u64;
    assert_eq!(figure(summary, &format!("sink {sink}:")), rows, "{summary}");
}

#[test]
fn metrics_of_a_file_run_agree_with_its_summary_and_state() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pb = write_schema(d);
    let n = 30_000u64;
    write_quotes(
        &d.join("q.bin"),
        n,
        7,
        QuoteFormat::Protobuf,
        Framing::Varint,
    );
    let sql = d.join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, ...) WITH ('connector' = 'file', \
             'path' = '{}', 'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}', \
             'state.dir' = '{}', 'dedup.key' = 'ticker,sequence_number', 'commit.interval' = '200ms');\n\
             CREATE SINK out FROM q WITH ('connector' = 'parquet', 'path' = '{}');\n",
            d.join("q.bin").display(),
            pb.display(),
            d.join("state").display(),
            d.join("out").display()
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let err = d.join("stderr");
    let mut child = spawn(
        &[
            "--log-format",
            "json",
            "run",
            "--follow",
            "--metrics-addr",
            &addr,
            &sql.display().to_string(),
        ],
        &err,
    );
    let n_f = n as f64;
    let text = scrape_until(&addr, &mut child, |s| {
        sum(s, "weir_dedup_rows_checked_total", &[("source", "q")]) == n_f
    });
    let s = samples(&text);
    let file = d.join("q.bin").display().to_string();
    let at = [("source", "q"), ("partition", file.as_str())];
    assert_eq!(sum(&s, "weir_source_messages_total", &at), n_f, "{text}");
    assert_eq!(sum(&s, "weir_source_rows_decoded_total", &at), n_f);
    assert!(sum(&s, "weir_source_bytes_total", &at) > n_f * 20.0);
    assert!(sum(&s, "weir_source_decode_seconds_count", &at) >= 1.0);
    assert_eq!(sum(&s, "weir_source_ready", &[("source", "q")]), 1.0);
    assert_eq!(sum(&s, "weir_sink_rows_total", &[("sink", "out")]), n_f);
    assert!(sum(&s, "weir_sink_files_total", &[("sink", "out")]) >= 1.0);
    assert!(sum(&s, "weir_sink_commit_seconds_count", &[("sink", "out")]) >= 1.0);
    assert!(sum(&s, "weir_state_step", &[("source", "q")]) >= 1.0);
    // Block-cache figures by kind, apart.
    assert_eq!(count(&s, "weir_dedup_block_cache_hits_total"), 3, "{text}");
    assert_eq!(count(&s, "weir_build_info"), 1);
    assert!(sum(&s, "process_resident_memory_bytes", &[]) > 0.0);
    assert!(sum(&s, "process_open_fds", &[]) > 0.0);
    assert_eq!(count(&s, "process_cpu_seconds_total"), 1);
    assert_eq!(get(&addr, "/health").unwrap().0, 200);
    assert_eq!(get(&addr, "/ready").unwrap().0, 200);
    assert_eq!(get(&addr, "/nothing").unwrap().0, 404);
    let summary = interrupt(child, &err);
    same_figures(&s, &summary, &d.join("state"), "q", "out");
    // Log lines are JSON objects on standard error (the summary lines are the interface).
    let logs: Vec<serde_json::Value> = summary
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        logs.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.contains("serving metrics"))),
        "{summary}"
    );
    assert!(logs
        .iter()
        .all(|l| l["level"].is_string() && l["target"].is_string()));
}

/// Idle and trickling clients do not hold the endpoint: with eight connections that send
/// nothing and one that sends a byte a second, a scrape and a readiness probe are answered
/// (each within a 5 s read limit; one connection at a time would take 2 s per idle client).
#[test]
fn slow_and_idle_clients_do_not_starve_a_scrape() {
    let engine = weir::Engine::new(weir::EngineOptions::default());
    let server = weir::MetricsServer::start("127.0.0.1:0", engine.metrics_handle()).unwrap();
    let addr = server.addr().to_string();
    let idle: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    // Connected here, not in the thread: the scrapes below may be done, and the server
    // stopped, before the thread first runs.
    let mut s = TcpStream::connect(&addr).unwrap();
    let trickler = std::thread::spawn(move || {
        for b in b"GET /metrics HTTP/1.1\r\n" {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1000));
        }
    });
    let quick = |path: &str| {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{path} not answered while clients idle: {e}"));
        text
    };
    let metrics = quick("/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(metrics.contains("# EOF"), "{metrics}");
    let ready = quick("/ready");
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(quick("/nowhere").starts_with("HTTP/1.1 404"));
    let mut post = TcpStream::connect(&addr).unwrap();
    post.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        post,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    post.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    drop(idle);
    server.stop();
    trickler.join().unwrap();
}

#[test]
fn ready_waits_for_every_source() {
    // Two sources, one never read: `/ready` answers 503 and names it, while the one being
    // read is ready; `/health` answers all along.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pb = write_schema(d);
    write_quotes(
        &d.join("q.bin"),
        100,
        3,
        QuoteFormat::Protobuf,
        Framing::Varint,
    );
    let source = |name: &str| {
        format!(
            "CREATE SOURCE {name} (ticker VARCHAR) WITH ('connector' = 'file', 'path' = '{}', \
             'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '{}');\n",
            d.join("q.bin").display(),
            pb.display()
        )
    };
    let sql = d.join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "{}{}CREATE SINK out FROM read WITH ('connector' = 'parquet', 'path' = '{}');\n",
            source("read"),
            source("unread"),
            d.join("out.parquet").display()
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let err = d.join("stderr");
    let mut child = spawn(
        &[
            "run",
            "--follow",
            "--metrics-addr",
            &addr,
            &sql.display().to_string(),
        ],
        &err,
    );
    let text = scrape_until(&addr, &mut child, |s| {
        sum(s, "weir_source_ready", &[("source", "read")]) == 1.0
    });
    assert_eq!(
        sum(
            &samples(&text),
            "weir_source_ready",
            &[("source", "unread")]
        ),
        0.0
    );
    let (status, body) = get(&addr, "/ready").unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unread") && !body.contains("read,"), "{body}");
    assert_eq!(get(&addr, "/health").unwrap().0, 200);
    interrupt(child, &err);
}

fn kafka() -> Option<String> {
    let Ok(addr) = std::env::var("WEIR_KAFKA_BOOTSTRAP") else {
        eprintln!("NOTICE: kafka metrics test skipped: WEIR_KAFKA_BOOTSTRAP is not set (scripts/test.sh sets it)");
        return None;
    };
    let sock = addr.parse().expect("WEIR_KAFKA_BOOTSTRAP is host:port");
    TcpStream::connect_timeout(&sock, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("WEIR_KAFKA_BOOTSTRAP={addr} is set but unreachable: {e}"));
    Some(addr)
}

/// Prometheus's address and its targets directory, from scripts/prometheus.sh.
fn prometheus() -> Option<(String, String)> {
    let (Ok(url), Ok(targets)) = (
        std::env::var("WEIR_PROMETHEUS_URL"),
        std::env::var("WEIR_PROMETHEUS_TARGETS"),
    ) else {
        eprintln!("NOTICE: the Prometheus part of the kafka metrics test skipped: WEIR_PROMETHEUS_URL is not set (scripts/test.sh sets it with scripts/prometheus.sh)");
        return None;
    };
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    match get(&addr, "/-/ready") {
        Ok((200, _)) => Some((addr, targets)),
        other => panic!("WEIR_PROMETHEUS_URL={url} is set but not ready: {other:?}"),
    }
}

/// A PromQL query's value: the first sample of an instant vector, `None` when empty.
fn promql(addr: &str, query: &str) -> Option<f64> {
    let mut q = String::new();
    for b in query.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            q.push(b as char);
        } else {
            q.push_str(&format!("%{b:02X}"));
        }
    }
    let (status, body) = get(addr, &format!("/api/v1/query?query={q}")).ok()?;
    assert_eq!(status, 200, "{query}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Every metric name the dashboard's queries use.
fn dashboard_metrics() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/weir.json");
    let text = std::fs::read_to_string(&path).expect("deploy/grafana/weir.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&json, &mut queries);
    assert!(
        queries.len() >= 10,
        "the dashboard has {} queries",
        queries.len()
    );
    let mut names = Vec::new();
    for q in &queries {
        let mut word = String::new();
        for c in q.chars().chain([' ']) {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                word.push(c);
            } else {
                if (word.starts_with("weir_") || word.starts_with("process_"))
                    && !names.contains(&word)
                {
                    names.push(word.clone());
                }
                word.clear();
            }
        }
    }
    names
}

#[test]
fn kafka_metrics_reach_prometheus_and_the_dashboard() {
    let Some(broker) = kafka() else { return };
    let prom = prometheus();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pb = write_schema(d);
    let topic = format!(
        "metrics-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.subsec_nanos())
    );
    let n = 6_000u64;
    let sent = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "gen",
            "quotes",
            "--count",
            &n.to_string(),
            "--to",
            &format!("kafka://{broker}/{topic}"),
            "--topic-partitions",
            "3",
            "--duplicates",
            "0.1",
        ])
        .output()
        .expect("weir gen");
    assert!(sent.status.success(), "{sent:?}");
    let sql = d.join("p.sql");
    // A TLS setting on a plaintext source: weir-kafka warns through the `log` bridge; the
    // password next to it must never be logged, even at trace level.
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, ...) WITH ('connector' = 'kafka', \
             'brokers' = '{broker}', 'topic' = '{topic}', 'encoding' = 'protobuf', \
             'message' = 'stocks.QuoteNBBO', 'location' = '{}', 'state.dir' = '{}', \
             'dedup.key' = 'ticker,sequence_number', 'commit.interval' = '300ms', \
             'ssl.ca.pem' = 'not used', 'sasl.password' = '{SECRET}');\n\
             CREATE SINK out FROM q WITH ('connector' = 'parquet', 'path' = '{}');\n",
            pb.display(),
            d.join("state").display(),
            d.join("out").display()
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let err = d.join("stderr");
    let mut child = spawn(
        &[
            "--log-level",
            "trace",
            "run",
            "--follow",
            "--metrics-addr",
            &addr,
            &sql.display().to_string(),
        ],
        &err,
    );
    if let Some((_, targets)) = &prom {
        std::fs::write(
            Path::new(targets).join(format!("{topic}.json")),
            format!(r#"[{{"targets": ["{addr}"], "labels": {{"job": "{topic}"}}}}]"#),
        )
        .unwrap();
    }
    let n_f = n as f64;
    let text = scrape_until(&addr, &mut child, |s| {
        sum(s, "weir_source_messages_total", &[("source", "q")]) == n_f
            && count(s, "weir_source_lag_messages") == 3
            && sum(s, "weir_source_lag_messages", &[("source", "q")]) == 0.0
            && sum(s, "weir_dedup_rows_checked_total", &[("source", "q")]) == n_f
    });
    let s = samples(&text);
    for p in ["0", "1", "2"] {
        let at = [("source", "q"), ("partition", p)];
        assert!(sum(&s, "weir_source_messages_total", &at) > 0.0, "{text}");
        assert!(sum(&s, "weir_source_position", &at) > 0.0);
        assert_eq!(
            sum(&s, "weir_source_position", &at),
            sum(&s, "weir_source_log_end_offset", &at)
        );
        assert_eq!(sum(&s, "weir_source_lag_seconds", &at), 0.0);
        assert!(sum(&s, "weir_source_fetch_latency_seconds_count", &at) >= 1.0);
        assert!(sum(&s, "weir_source_decode_seconds_count", &at) >= 1.0);
    }
    let dropped = sum(
        &s,
        "weir_dedup_duplicates_dropped_total",
        &[("source", "q")],
    );
    assert!(dropped > 0.0, "--duplicates 0.1 sent repeats: {text}");
    assert_eq!(
        sum(&s, "weir_sink_rows_total", &[("sink", "out")]),
        n_f - dropped
    );
    assert_eq!(get(&addr, "/ready").unwrap().0, 200);

    // Every series the dashboard queries is one this run exports.
    let exported: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
    for name in dashboard_metrics() {
        assert!(
            exported.contains(&name.as_str()),
            "deploy/grafana/weir.json queries {name}, which weir does not export:\n{text}"
        );
    }

    // Prometheus scraped the run: its counter equals what was produced, and the lag is 0.
    if let Some((paddr, _)) = &prom {
        let start = Instant::now();
        let total = format!("sum(weir_source_messages_total{{job=\"{topic}\",source=\"q\"}})");
        let lag = format!("max(weir_source_lag_messages{{job=\"{topic}\",source=\"q\"}})");
        let parts = format!("count(weir_source_lag_messages{{job=\"{topic}\",source=\"q\"}})");
        loop {
            let (t, l, c) = (
                promql(paddr, &total),
                promql(paddr, &lag),
                promql(paddr, &parts),
            );
            if t == Some(n_f) && l == Some(0.0) && c == Some(3.0) {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "Prometheus at {paddr} answered {total} = {t:?}, {lag} = {l:?}, {parts} = {c:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    let summary = interrupt(child, &err);
    same_figures(&s, &summary, &d.join("state"), "q", "out");
    assert!(
        summary.contains("weir_kafka::security::options")
            && summary.contains("TLS settings are given"),
        "weir-kafka's warning reaches the log:\n{summary}"
    );
    assert!(!summary.contains(SECRET), "a secret was logged:\n{summary}");
    if let Some((_, targets)) = &prom {
        let _ = std::fs::remove_file(Path::new(targets).join(format!("{topic}.json")));
    }
}

/// `/ready` answers 503 while a kafka source has lost its broker, naming the source, and 200
/// again once the broker is back and the source reads on; the run itself goes on.
#[test]
fn ready_follows_a_kafka_source_losing_its_broker() {
    if kafka().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (broker, bootstrap) = PrivateBroker::start(d.join("kafka-run"));
    let pb = write_schema(d);
    let sent = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "gen",
            "quotes",
            "--count",
            "2000",
            "--to",
            &format!("kafka://{bootstrap}/ready"),
            "--topic-partitions",
            "2",
        ])
        .output()
        .expect("weir gen");
    assert!(sent.status.success(), "{sent:?}");
    let sql = d.join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE q (ticker VARCHAR) WITH ('connector' = 'kafka', \
             'brokers' = '{bootstrap}', 'topic' = 'ready', 'encoding' = 'protobuf', \
             'message' = 'stocks.QuoteNBBO', 'location' = '{}');\n\
             CREATE SINK out FROM q WITH ('connector' = 'parquet', 'path' = '{}');\n",
            pb.display(),
            d.join("out.parquet").display()
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let err = d.join("stderr");
    let mut child = spawn(
        &[
            "run",
            "--follow",
            "--metrics-addr",
            &addr,
            &sql.display().to_string(),
        ],
        &err,
    );
    // Polls `/ready` until it answers `status`; returns the body.
    let mut wait_for = |status: u16| {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if let Some(s) = child.try_wait().expect("weir's status") {
                panic!(
                    "weir exited early ({s}): {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
            if let Ok((got, body)) = get(&addr, "/ready") {
                if got == status {
                    return body;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("/ready did not answer {status} within {DEADLINE:?}");
    };
    wait_for(200);
    let run = broker.run.clone();
    let restart = std::thread::spawn(move || PrivateBroker::kafka_sh(&run, "restart"));
    let body = wait_for(503);
    assert!(body.contains('q'), "{body}");
    wait_for(200);
    let out = restart.join().unwrap();
    assert!(
        out.status.success(),
        "the restart failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    interrupt(child, &err);
}
