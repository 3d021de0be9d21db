//! The key-order prediction must never change a result: a long-lived decoder (whose predictions
//! are warm from the messages before) and a fresh decoder (no predictions) must give the same
//! rows, and the same errors at the same offsets, for every message. The messages here follow
//! one key order most of the time, as a stream does, and then break it in every way that matters
//! to the prediction: keys moved, dropped, added and repeated; whitespace around the colon; raw
//! key text with escapes; keys too long to predict; values long, escaped, non-ASCII, nested or
//! invalid right after a predicted key; values near the end of the message; and random byte
//! mutations.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, TimeUnit};
use weir_codec::{ColumnSpec, Decoder, JsonDecoder, JsonDecoderOptions};

use weir_testdata::Rng;

/// The raw key texts of the template, in the order a producer writes them. Some are requested
/// (see [`columns`]); some are long (past what a prediction holds) or escaped.
fn template() -> Vec<String> {
    let mut keys: Vec<String> = (0..30)
        .map(|i| {
            let stem = ["id", "price", "name", "flag", "when", "note"][i % 6];
            format!("{stem}_{i:02}")
        })
        .collect();
    keys.push("a_key_name_that_is_longer_than_thirty_one_bytes".into());
    keys.push("n\\u0061me_02".into()); // the same key as "name_02" once unescaped
    keys.push("st".into());
    keys.push("nested".into());
    keys.push("items".into());
    keys
}

fn columns() -> Vec<ColumnSpec> {
    let item = DataType::Struct(Fields::from(vec![
        Field::new("id_00", DataType::Int64, true),
        Field::new("name_02", DataType::Utf8, true),
    ]));
    vec![
        ColumnSpec::new("id_06", DataType::Int64),
        ColumnSpec::new("price_07", DataType::Float64),
        ColumnSpec::new("name_02", DataType::Utf8),
        ColumnSpec::new("flag_15", DataType::Boolean),
        ColumnSpec::new("when_22", DataType::Timestamp(TimeUnit::Millisecond, None)),
        ColumnSpec::new(
            "a_key_name_that_is_longer_than_thirty_one_bytes",
            DataType::Utf8,
        ),
        ColumnSpec::new("st", item.clone()),
        ColumnSpec::new("deep", DataType::Utf8).with_path("nested.inner.name_02"),
        ColumnSpec::new(
            "items",
            DataType::List(Arc::new(Field::new("item", item, true))),
        ),
    ]
}

fn string(rng: &mut Rng) -> String {
    let len = [0, 1, 3, 8, 15, 29, 30, 31, 32, 33, 60][rng.index(11)];
    let mut s = String::from("\"");
    for _ in 0..len {
        match rng.index(40) {
            0 => s.push_str("\\\""),
            1 => s.push_str("\\u00e9"),
            2 => s.push('é'),
            3 => s.push_str("\\n"),
            _ => s.push((b'a' + rng.index(26) as u8) as char),
        }
    }
    s.push('"');
    s
}

fn number(rng: &mut Rng) -> String {
    match rng.index(8) {
        0 => "0".into(),
        1 => format!("-{}", rng.index(1000)),
        2 => format!("{}", rng.next_u64() >> rng.index(64)),
        3 => format!("{}.{}", rng.index(100000), rng.index(1000)),
        4 => format!("{}e{}", rng.index(100), rng.index(30)),
        5 => format!("-{}.{}E-{}", rng.index(10), rng.index(100), rng.index(9)),
        6 => "123456789012345678901234567890123".into(),
        _ => format!("{}", rng.index(100)),
    }
}

fn timestamp(rng: &mut Rng) -> String {
    format!(
        "\"2026-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z\"",
        1 + rng.index(12),
        1 + rng.index(28),
        rng.index(24),
        rng.index(60),
        rng.index(60),
        rng.index(1000)
    )
}

fn value(rng: &mut Rng, key: &str) -> String {
    if rng.percent(5) {
        return "null".into();
    }
    if rng.index(300) == 0 {
        // Any value at all, requested or not: mismatches and containers after predicted keys.
        return [
            "{\"x\":[1,2,{\"y\":\"z\"}]}",
            "[]",
            "[1,\"a\",null]",
            "true",
            "false",
            "\"text\"",
            "12.5",
        ][rng.index(7)]
        .into();
    }
    match key {
        "st" => format!(
            "{{\"id_00\":{},\"name_02\":{},\"other\":{}}}",
            rng.index(1000),
            string(rng),
            string(rng)
        ),
        "nested" => format!(
            "{{\"skip\":{},\"inner\":{{\"name_02\":{},\"more\":{}}}}}",
            number(rng),
            string(rng),
            number(rng)
        ),
        "items" => {
            let n = rng.index(4);
            let items: Vec<String> = (0..n)
                .map(|_| {
                    format!(
                        "{{\"id_00\":{},\"extra\":{},\"name_02\":{}}}",
                        rng.index(1000),
                        string(rng),
                        string(rng)
                    )
                })
                .collect();
            format!("[{}]", items.join(","))
        }
        k if k.starts_with("id") => format!("{}", rng.index(1 << 40)),
        k if k.starts_with("price") => number(rng),
        k if k.starts_with("flag") => ["true", "false"][rng.index(2)].into(),
        k if k.starts_with("when") => timestamp(rng),
        _ => string(rng),
    }
}

/// A message: the template order most of the time, otherwise broken in one of several ways.
fn message(rng: &mut Rng, keys: &[String]) -> Vec<u8> {
    let mut order: Vec<String> = keys.to_vec();
    match rng.index(20) {
        0 => {
            let (a, b) = (rng.index(order.len()), rng.index(order.len()));
            order.swap(a, b);
        }
        1 => {
            order.remove(rng.index(order.len()));
        }
        2 => order.insert(rng.index(order.len() + 1), "surprise".into()),
        3 => {
            let k = order[rng.index(order.len())].clone();
            order.insert(rng.index(order.len() + 1), k);
        }
        4 => order.truncate(rng.index(order.len())),
        _ => {}
    }
    let mut out = String::from("{");
    for (i, k) in order.iter().enumerate() {
        if i > 0 {
            out.push(',');
            if rng.percent(2) {
                out.push(' ');
            }
        }
        out.push('"');
        out.push_str(k);
        out.push('"');
        if rng.percent(2) {
            out.push_str(" \t");
        }
        out.push(':');
        if rng.percent(2) {
            out.push('\n');
        }
        let plain = k.replace("\\u0061", "a");
        out.push_str(&value(rng, &plain));
    }
    out.push('}');
    let mut bytes = out.into_bytes();
    if rng.percent(15) {
        const TOKENS: &[&[u8]] = &[
            b",", b"}", b"{", b"\"", b":", b"\\", b"0", b"-", b".", b"e", b"01", b" ", b"\x01",
            b"\xff", b"tru", b"[",
        ];
        for _ in 0..1 + rng.index(2) {
            let at = rng.index(bytes.len() + 1);
            match rng.index(3) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                1 if at < bytes.len() => bytes[at] = TOKENS[rng.index(TOKENS.len())][0],
                _ => {
                    let t = TOKENS[rng.index(TOKENS.len())];
                    bytes.splice(at..at, t.iter().copied());
                }
            }
        }
    }
    bytes
}

fn iterations() -> usize {
    std::env::var("WEIR_JSON_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
        * 4
}

#[test]
fn warm_predictions_never_change_a_row_or_an_error() {
    let keys = template();
    for (name, options) in [
        ("errors", JsonDecoderOptions::default()),
        (
            "nulls",
            JsonDecoderOptions {
                mismatch: weir_codec::JsonMismatch::Null,
                ..JsonDecoderOptions::default()
            },
        ),
    ] {
        let mut rng = Rng::new(0x000d_de0f_7e57);
        let mut warm = JsonDecoder::new(&columns(), options).unwrap();
        let (mut ok, mut failed) = (0, 0);
        for i in 0..iterations() {
            let bytes = message(&mut rng, &keys);
            let mut cold = warm.fresh();
            let got = warm.decode(&bytes).map_err(|e| e.to_string());
            let want = cold.decode(&bytes).map_err(|e| e.to_string());
            let text = String::from_utf8_lossy(&bytes);
            assert_eq!(got, want, "{name}, message {i}: {text}");
            match got {
                Ok(()) => ok += 1,
                Err(_) => failed += 1,
            }
            assert_eq!(warm.flush(), cold.flush(), "{name}, message {i}: {text}");
        }
        assert!(
            ok > iterations() / 2 && failed > iterations() / 50,
            "{name}: {ok} decoded, {failed} rejected"
        );
    }
}
