//! The `weir` program as a user runs it: gen, decode, run, demo, and its error messages.

use std::path::Path;
use std::process::{Command, Output};

use weir_testdata::QuoteGenerator;

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .output()
        .expect("run weir")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn gen(dir: &Path, n: &str, format: &str, file: &str) -> String {
    let out = dir.join(file).display().to_string();
    let schema = dir.join("schema").display().to_string();
    let o = weir(&[
        "gen",
        "quotes",
        "--count",
        n,
        "--format",
        format,
        "--out",
        &out,
        "--schema-dir",
        &schema,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    out
}

#[test]
fn help_tells_every_command() {
    let o = weir(&["--help"]);
    assert!(o.status.success());
    let help = text(&o.stdout);
    for cmd in ["run", "gen", "decode", "produce", "demo", "stats"] {
        assert!(help.contains(cmd), "{help}");
    }
    let o = weir(&["run", "--help"]);
    assert!(text(&o.stdout).contains("--follow"));
}

#[test]
fn gen_then_decode_prints_the_generated_quotes() {
    let dir = tempfile::tempdir().unwrap();
    let data = gen(dir.path(), "50", "protobuf", "q.bin");
    let pb = dir.path().join("schema/stocks.pb").display().to_string();
    let o = weir(&[
        "decode",
        "--location",
        &pb,
        "--message",
        "stocks.QuoteNBBO",
        "--input",
        &data,
        "--limit",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    let mut g = QuoteGenerator::new(weir_testdata::DEFAULT_SEED);
    for line in &lines {
        let q = g.next_quote();
        assert_eq!(line["base"]["ticker"], q.ticker);
        assert_eq!(line["bid_price"], q.bid_price);
        assert_eq!(line["tape"], q.tape);
    }
    // The .proto file works as well as the descriptor set, and a table is printed.
    let proto = dir.path().join("schema/stocks.proto").display().to_string();
    let o = weir(&[
        "decode",
        "--location",
        &proto,
        "--message",
        "stocks.QuoteNBBO",
        "--input",
        &data,
        "--output",
        "table",
        "--limit",
        "2",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("| base"), "{}", text(&o.stdout));
    // A damaged file: the error names the file and the byte offset.
    let mut bytes = std::fs::read(&data).unwrap();
    bytes.truncate(bytes.len() - 5);
    std::fs::write(&data, &bytes).unwrap();
    let o = weir(&[
        "decode",
        "--location",
        &pb,
        "--message",
        "stocks.QuoteNBBO",
        "--input",
        &data,
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("q.bin at byte") && err.contains("ends inside a message"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn gen_avro_then_decode_prints_the_same_quotes() {
    let dir = tempfile::tempdir().unwrap();
    let data = gen(dir.path(), "20", "avro", "q.avro.bin");
    let avsc = dir.path().join("schema/stocks.avsc").display().to_string();
    let o = weir(&[
        "decode",
        "--encoding",
        "avro",
        "--location",
        &avsc,
        "--input",
        &data,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 20);
    let mut g = QuoteGenerator::new(weir_testdata::DEFAULT_SEED);
    for line in &lines {
        let q = g.next_quote();
        assert_eq!(line["base"]["ticker"], q.ticker);
        assert_eq!(line["bid_price"], q.bid_price);
        assert_eq!(line["bid_size"], q.bid_size);
        assert_eq!(line["conditions"], q.conditions);
    }
    // Protobuf needs its message name.
    let o = weir(&["decode", "--location", &avsc, "--input", &data]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("--message is required"),
        "{}",
        text(&o.stderr)
    );
}

/// `weir decode` on `data` with the generated schema and `args`.
fn decode(dir: &Path, data: &Path, args: &[&str]) -> Output {
    let pb = dir.join("schema/stocks.pb").display().to_string();
    let data = data.display().to_string();
    let mut all = vec![
        "decode",
        "--location",
        &pb,
        "--message",
        "stocks.QuoteNBBO",
        "--input",
        &data,
    ];
    all.extend_from_slice(args);
    weir(&all)
}

#[test]
fn decode_prints_the_rows_before_a_bad_message_and_names_its_own_flag() {
    let dir = tempfile::tempdir().unwrap();
    gen(dir.path(), "1", "protobuf", "unused.bin");
    // Three good quotes, a message that is not a quote (field 1 declared as 5 bytes, 1 there),
    // then two more good ones.
    let mut g = QuoteGenerator::new(5);
    let mut bytes = Vec::new();
    let mut frame = |msg: &[u8]| weir_codec::Framing::Varint.write(&mut bytes, msg).unwrap();
    let mut msg = Vec::new();
    for _ in 0..3 {
        msg.clear();
        g.next_quote().encode_protobuf(&mut msg);
        frame(&msg);
    }
    frame(&[0x0a, 0x05, 0x01]);
    for _ in 0..2 {
        msg.clear();
        g.next_quote().encode_protobuf(&mut msg);
        frame(&msg);
    }
    let data = dir.path().join("bad.bin");
    std::fs::write(&data, &bytes).unwrap();
    let o = decode(dir.path(), &data, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stdout).lines().count(), 3, "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("pass --skip-errors"), "{err}");
    assert!(!err.contains("on.error"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = decode(dir.path(), &data, &["--skip-errors"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 5);
    assert!(text(&o.stderr).contains("skipped 1 messages"));
}

#[test]
fn a_frame_length_near_two_to_the_64_is_refused_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    gen(dir.path(), "1", "protobuf", "unused.bin");
    // An empty message (all defaults), then the huge frame.
    let mut bytes = vec![0x00];
    // The largest ten-byte varint, 2^64 - 1, then a few bytes.
    bytes.extend_from_slice(&[
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 7, 7,
    ]);
    let data = dir.path().join("huge.bin");
    std::fs::write(&data, &bytes).unwrap();
    let o = decode(dir.path(), &data, &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains("huge.bin at byte 1")
            && err
                .contains("a message of 18446744073709551615 bytes, more than 'max.message.bytes'"),
        "{err}"
    );
}

#[test]
fn infinities_and_nan_survive_json_output_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    gen(dir.path(), "1", "protobuf", "unused.bin");
    let mut g = QuoteGenerator::new(3);
    let mut bytes = Vec::new();
    let mut msg = Vec::new();
    for price in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1.25] {
        let mut q = g.next_quote();
        q.bid_price = price;
        msg.clear();
        q.encode_protobuf(&mut msg);
        weir_codec::Framing::Varint.write(&mut bytes, &msg).unwrap();
    }
    let data = dir.path().join("special.bin");
    std::fs::write(&data, &bytes).unwrap();
    let o = decode(dir.path(), &data, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let bids: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["bid_price"].clone())
        .collect();
    assert_eq!(
        bids,
        [
            serde_json::json!("Infinity"),
            serde_json::json!("-Infinity"),
            serde_json::json!("NaN"),
            serde_json::json!(1.25)
        ]
    );
    // Read back by the JSON decoder, the values are the same doubles.
    let jsonl = dir.path().join("special.jsonl");
    std::fs::write(&jsonl, &out).unwrap();
    let sql = dir.path().join("back.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE back (bid_price DOUBLE) WITH ('connector' = 'file', 'path' = '{}', \
             'framing' = 'lines', 'encoding' = 'json');\n\
             SELECT CAST(bid_price AS VARCHAR) AS b FROM back;",
            jsonl.display()
        ),
    )
    .unwrap();
    let result = dir.path().join("back.jsonl");
    let o = weir(&[
        "run",
        "--quiet",
        "--partitions",
        "1",
        "--output",
        result.to_str().unwrap(),
        sql.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(&result).unwrap(),
        "{\"b\":\"inf\"}\n{\"b\":\"-inf\"}\n{\"b\":\"NaN\"}\n{\"b\":\"1.25\"}\n"
    );
}

#[test]
fn run_writes_sinks_and_outputs_and_reports_counts() {
    let dir = tempfile::tempdir().unwrap();
    let data = gen(dir.path(), "2000", "protobuf", "q.bin");
    let pb = dir.path().join("schema/stocks.pb").display().to_string();
    let parquet = dir.path().join("out.parquet").display().to_string();
    let sql = dir.path().join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "-- a pipeline
CREATE SOURCE quotes (ticker VARCHAR, bid_price DOUBLE, ask_price DOUBLE) WITH (
  'connector' = 'file', 'path' = '{data}', 'encoding' = 'protobuf',
  'message' = 'stocks.QuoteNBBO', 'location' = '{pb}');
CREATE SINK wide FROM (SELECT ticker, ask_price - bid_price AS spread FROM quotes)
  WITH ('connector' = 'parquet', 'path' = '{parquet}');
SELECT count(*) AS n FROM quotes;"
        ),
    )
    .unwrap();
    let sql = sql.display().to_string();
    let o = weir(&["run", &sql]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("| 2000 |"), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("source quotes: 4,000 messages"), "{err}");
    assert!(err.contains("sink wide: 2,000 rows"), "{err}");
    assert!(
        !err.contains('\r'),
        "no progress line when stderr is not a terminal"
    );
    assert!(Path::new(&parquet).exists());

    let jsonl = dir.path().join("n.jsonl").display().to_string();
    let o = weir(&["run", &sql, "--quiet", "--output", &jsonl]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "");
    assert_eq!(
        std::fs::read_to_string(&jsonl).unwrap().trim(),
        "{\"n\":2000}"
    );
}

#[test]
fn bad_input_exits_with_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let o = weir(&["run", "/no/such/pipeline.sql"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("/no/such/pipeline.sql"));
    let sql = dir.path().join("bad.sql");
    std::fs::write(
        &sql,
        "SELECT 1;\n\nCREATE SOURCE x WITH ('connector' = 'file' 'path' = 'y');",
    )
    .unwrap();
    let o = weir(&["run", sql.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(err.contains("line 3, column 44"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let input = sql.to_str().unwrap();
    let o = weir(&[
        "decode",
        "--location",
        "/no.proto",
        "--message",
        "a.B",
        "--input",
        input,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("/no.proto"), "{}", text(&o.stderr));
}

#[test]
fn demo_runs_on_the_embedded_default() {
    let o = weir(&["demo", "--count", "20000", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("| ticker"), "{out}");
    assert!(out.contains("20,000 quotes"), "{out}");
}

#[test]
fn json_quotes_are_generated_as_lines() {
    let dir = tempfile::tempdir().unwrap();
    let data = gen(dir.path(), "10", "json", "q.jsonl");
    let text = std::fs::read_to_string(data).unwrap();
    assert_eq!(text.lines().count(), 10);
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v["base"]["ticker"].is_string());
    }
}

#[test]
fn stats_reads_the_state_a_run_left() {
    let dir = tempfile::tempdir().unwrap();
    // 3,000 quotes with about 10% exact repeats, then a run that drops them.
    let data = dir.path().join("q.bin").display().to_string();
    let schema = dir.path().join("schema").display().to_string();
    let o = weir(&[
        "gen",
        "quotes",
        "--count",
        "3000",
        "--duplicates",
        "0.1",
        "--out",
        &data,
        "--schema-dir",
        &schema,
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let state = dir.path().join("state");
    let out = dir.path().join("out");
    let sql = dir.path().join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE)
               WITH ('connector' = 'file', 'path' = '{data}', 'encoding' = 'protobuf',
                     'message' = 'stocks.QuoteNBBO', 'location' = '{schema}/stocks.pb',
                     'state.dir' = '{}', 'dedup.key' = 'ticker,sequence_number');
             CREATE SINK out FROM q WITH ('connector' = 'parquet', 'path' = '{}');",
            state.display(),
            out.display()
        ),
    )
    .unwrap();
    let o = weir(&["run", sql.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let report = text(&o.stderr);
    assert!(report.contains("source q, state:"), "{report}");
    let dropped: u64 = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("duplicates dropped:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no duplicate count in {report}"));
    assert!((150..450).contains(&dropped), "{dropped} of 3000 dropped");

    let o = weir(&["stats", state.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stats = text(&o.stdout);
    assert!(
        stats.contains("key=ticker,sequence_number;hash=xxh3_128"),
        "{stats}"
    );
    assert!(
        stats.contains(&format!("duplicates dropped:     {dropped}")),
        "{stats}"
    );
    assert!(stats.contains("data blocks:"), "{stats}");
    // The next position of the file is its size: everything was read.
    let size = std::fs::metadata(&data).unwrap().len();
    assert!(stats.contains(&format!("file:{data} {size}")), "{stats}");

    let o = weir(&["stats", dir.path().join("nothing").to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("not a state directory"),
        "{}",
        text(&o.stderr)
    );
}

/// Runs `weir run` on `sql` with debug logs in JSON lines; returns its exit code and all it
/// printed.
fn run_logged(dir: &Path, name: &str, sql: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let file = dir.join(name);
    std::fs::write(&file, sql).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--log-level", "debug", "--log-format", "json", "run"])
        .arg(&file)
        .envs(env.iter().copied())
        .output()
        .expect("run weir");
    (
        o.status.code(),
        format!("{}\n{}", text(&o.stdout), text(&o.stderr)),
    )
}

/// Secrets never show in what weir prints: runs that fail on each kind of credential (a
/// registry URL's user info, a registry password, an object store's secret key), and a run
/// that succeeds with its summary (under the test command, which starts an object store), each
/// with debug logs, are searched for every secret.
#[test]
fn no_secret_shows_in_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let data = gen(dir.path(), "20", "protobuf", "q.bin");
    let pb = dir.path().join("schema/stocks.pb").display().to_string();
    let secrets = ["url-MARK-1", "basic-MARK-2", "s3-MARK-3", "env-MARK-4"];
    let source = |extra: &str| {
        format!(
            "CREATE SOURCE q (ticker VARCHAR, bid_price DOUBLE) WITH ('connector' = 'file', \
             'path' = '{data}', 'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', \
             'location' = '{pb}'{extra});"
        )
    };
    let env = [("WEIR_TEST_SECRET", secrets[3])];
    let mut outputs = Vec::new();
    // A registry that is not there, reached with credentials in the URL, then in an option.
    for extra in [
        ", 'schema.registry.url' = 'http://weir:url-MARK-1@127.0.0.1:1', \
         'schema.registry.retries' = '0'",
        ", 'schema.registry.url' = 'http://127.0.0.1:1', 'schema.registry.retries' = '0', \
         'schema.registry.basic.auth.user.info' = 'weir:basic-MARK-2'",
    ] {
        // The columns come from the registry: asked for at CREATE SOURCE.
        let sql = format!(
            "CREATE SOURCE q WITH ('connector' = 'kafka', 'brokers' = '127.0.0.1:9', \
             'topic' = 'quotes', 'encoding' = 'protobuf'{extra});"
        );
        let (code, out) = run_logged(dir.path(), "r.sql", &sql, &env);
        assert_eq!(code, Some(1), "{out}");
        assert!(out.contains("127.0.0.1:1"), "{out}");
        outputs.push(out);
    }
    // An object store that is not there, with a literal key and one from the environment.
    let sink = format!(
        "{}\nCREATE SINK out FROM q WITH ('connector' = 'delta', 'path' = 's3://b/t', \
         's3.endpoint' = 'http://127.0.0.1:1', 's3.region' = 'us-east-1', \
         's3.access.key.id' = 'weir', 's3.secret.access.key' = 's3-MARK-3', \
         's3.session.token' = '${{env:WEIR_TEST_SECRET}}', 'storage.max.retries' = '0');",
        source("")
    );
    let (code, out) = run_logged(dir.path(), "s.sql", &sink, &env);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("s3://b/t"), "{out}");
    outputs.push(out);
    // A run that succeeds prints its summary: into the test command's object store, with its
    // real secret key from the environment.
    let mut secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
    if let Some((endpoint, key, secret, bucket)) = crate::common::s3() {
        let ok = format!(
            "{}\nCREATE SINK out FROM q WITH ('connector' = 'parquet', \
             'path' = 's3://{bucket}/cli-{}/out.parquet', 's3.endpoint' = '{endpoint}', \
             's3.region' = 'us-east-1', 's3.access.key.id' = '{key}', \
             's3.secret.access.key' = '${{env:WEIR_TEST_S3_SECRET}}');",
            source(""),
            std::process::id()
        );
        let env = [("WEIR_TEST_S3_SECRET", secret.as_str())];
        let (code, out) = run_logged(dir.path(), "ok.sql", &ok, &env);
        assert_eq!(code, Some(0), "{out}");
        assert!(out.contains("sink out: 20 rows to s3://"), "{out}");
        outputs.push(out);
        secrets.push(secret);
    }
    for out in &outputs {
        for secret in &secrets {
            assert!(!out.contains(secret.as_str()), "{secret} shows in:\n{out}");
        }
    }
}

#[test]
fn gen_writes_an_avro_container_file_that_fastavro_and_decode_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("quotes.avro");
    let schema = dir.path().join("schema");
    let o = weir(&[
        "gen",
        "quotes",
        "--count",
        "30000",
        "--format",
        "avro",
        "--framing",
        "avro-container",
        "--out",
        out.to_str().unwrap(),
        "--schema-dir",
        schema.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    // weir reads it back, every quote, in file order.
    let avsc = schema.join("stocks.avsc");
    let o = weir(&[
        "decode",
        "--encoding",
        "avro",
        "--location",
        avsc.to_str().unwrap(),
        "--framing",
        "avro-container",
        "--input",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 30000);
    // A container file is no stream of messages to produce.
    let o = weir(&[
        "produce",
        "--input",
        out.to_str().unwrap(),
        "--framing",
        "avro-container",
        "--to",
        "kafka://127.0.0.1:1/t",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("holds blocks of values"),
        "{}",
        text(&o.stderr)
    );
    // Another implementation reads the same quotes from it.
    let Ok(python) = std::env::var("WEIR_TEST_PYTHON") else {
        assert!(
            std::env::var("CI").is_err(),
            "WEIR_TEST_PYTHON must be set in CI"
        );
        eprintln!("NOTICE: fastavro's read of the container file skipped: WEIR_TEST_PYTHON unset");
        return;
    };
    let o = Command::new(python)
        .args([
            "-c",
            "import fastavro, json, sys\n\
             rs = list(fastavro.reader(open(sys.argv[1], 'rb')))\n\
             print(len(rs), rs[0]['base']['ticker'], rs[-1]['base']['sequence_number'])",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let got = text(&o.stdout);
    let want = format!(
        "30000 {} {}",
        lines[0]["base"]["ticker"].as_str().unwrap(),
        lines[29999]["base"]["sequence_number"]
    );
    assert_eq!(got.trim(), want);
}
