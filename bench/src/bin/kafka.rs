//! The Kafka read benchmark's weir side (scripts/bench_kafka.sh drives it and the peers).
//!
//!   kafka load BROKER TOPIC PARTITIONS COUNT [COMPRESSION]
//!       create TOPIC and write COUNT options quotes (the 1,000,000-quote corpus, cycled)
//!   kafka read BROKER TOPIC [raw|decode] [crc|nocrc] [--config FILE]
//!       read TOPIC to its end with weir's consumer; `decode` also decodes every value into
//!       Arrow batches of the 12 quote columns with weir's protobuf decoder; `--config` takes a
//!       Java properties file of security settings (`security.protocol=SASL_SSL`, ...), as
//!       `weir --kafka-config` does
//!
//! It prints one line of results; CPU time is measured around the process by the script.

use std::time::{Duration, Instant};

use weir_bench::quote;
use weir_bench::Result;
use weir_codec::{Decoder, ProtoDecoder, ProtoDecoderOptions, ProtoSchema};
use weir_kafka::{
    parse_properties, Compression, Consumer, ConsumerConfig, Isolation, PollStatus, Producer,
    ProducerConfig, SecurityConfig,
};

fn load(args: &[String]) -> Result<()> {
    let [broker, topic, partitions, count, rest @ ..] = args else {
        return Err("load BROKER TOPIC PARTITIONS COUNT [COMPRESSION]".into());
    };
    let partitions: i32 = partitions.parse()?;
    let count: usize = count.parse()?;
    let compression: Compression = rest.first().map_or("none", |s| s.as_str()).parse()?;
    weir_kafka::create_topic(
        std::slice::from_ref(broker),
        topic,
        partitions,
        1,
        &[],
        true,
    )?;
    let corpus = quote::generate(quote::MESSAGES, quote::SEED);
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        compression,
        ..ProducerConfig::default()
    })?;
    let start = Instant::now();
    for i in 0..count {
        p.send(
            Some((i % partitions as usize) as i32),
            None,
            corpus.message(i % corpus.len()),
        )?;
    }
    p.flush()?;
    let s = start.elapsed().as_secs_f64();
    println!(
        "loaded {count} quotes ({} bytes each on average) into {topic} in {s:.1} s ({:.0} msg/s)",
        corpus.avg_message_size(),
        count as f64 / s
    );
    Ok(())
}

fn read(args: &[String]) -> Result<()> {
    let [broker, topic, rest @ ..] = args else {
        return Err("read BROKER TOPIC [raw|decode] [crc|nocrc] [--config FILE]".into());
    };
    let (rest, security) = match rest.iter().position(|a| a == "--config") {
        Some(i) => {
            let file = rest.get(i + 1).ok_or("--config needs a file")?;
            let text = std::fs::read_to_string(file)?;
            (
                &rest[..i],
                SecurityConfig::from_properties(parse_properties(&text)?)?,
            )
        }
        None => (rest, SecurityConfig::default()),
    };
    let protocol = security.protocol.name();
    let decode = rest.first().is_some_and(|m| m == "decode");
    let check_crc = rest.get(1).is_none_or(|c| c != "nocrc");
    let mut decoder = if decode {
        // The schema lives in weir-testdata now (bench's stocks_dir() still names its old place).
        let proto = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crates/weir-testdata/src/stocks.proto");
        let schema = ProtoSchema::from_proto_file(proto, &[])?;
        Some(ProtoDecoder::new(
            &schema,
            quote::MESSAGE,
            &quote::weir_columns(),
            ProtoDecoderOptions::default(),
        )?)
    } else {
        None
    };
    let start = Instant::now();
    let mut c = Consumer::connect(&ConsumerConfig {
        brokers: vec![broker.clone()],
        topic: topic.clone(),
        isolation: Isolation::ReadUncommitted,
        check_crc,
        security,
        ..ConsumerConfig::default()
    })?;
    let mut messages = 0u64;
    let mut bytes = 0u64;
    let mut rows = 0usize;
    let mut decode_error = None;
    loop {
        let status = c.poll(Duration::from_millis(500), |r| {
            let v = r.value.unwrap_or_default();
            bytes += v.len() as u64;
            if let Some(d) = decoder.as_mut() {
                // The value is decoded where it lies in the fetch buffer: no copy.
                d.decode(v)?;
                if let Some(batch) = d.take_full_batch() {
                    rows += batch.num_rows();
                }
            }
            Ok::<(), weir_codec::DecodeError>(())
        });
        match status {
            Ok(PollStatus::Records(n)) => messages += n as u64,
            Ok(PollStatus::End) => break,
            Ok(PollStatus::Idle) => {}
            Err(e) => {
                decode_error = Some(e);
                break;
            }
        }
    }
    if let Some(e) = decode_error {
        return Err(e.into());
    }
    if let Some(d) = decoder.as_mut() {
        if let Some(batch) = d.flush() {
            rows += batch.num_rows();
        }
    }
    let s = start.elapsed().as_secs_f64();
    println!(
        "weir {} {protocol} crc={check_crc}: {messages} messages, {bytes} value bytes, {rows} rows in {s:.2} s: {:.0} msg/s",
        if decode { "read+decode" } else { "raw read" },
        messages as f64 / s
    );
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("load") => load(&args[1..]),
        Some("read") => read(&args[1..]),
        _ => Err("usage: kafka load|read ...".into()),
    }
}
