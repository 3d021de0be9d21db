//! What decoding through the schema-registry path costs per message, against the same framed
//! messages decoded with a local `.proto`, in the same run:
//!
//! * `local .proto + confluent.wire`: the framing stripped (`strip_confluent`, as the engine does
//!   for `'confluent.wire'`), then a [`ProtoDecoder`] compiled from `stocks.proto` on disk;
//! * `registry (one schema id)`: a [`FramedProtoDecoder`] whose plan for the schema id was
//!   compiled from the schema text as a registry hands it out (`ProtoSchema::from_sources`);
//!   its plan source is asked once, at the first message;
//! * `registry, two versions alternating (an added field)`: every other message framed with the
//!   id of a second version that only adds a field nobody reads (producers of two versions
//!   writing to one partition during a rolling upgrade): both ids compile to the same plan and
//!   share one decoder;
//! * `registry, two plans switching every 4096` and `... alternating`: the second version
//!   renumbers a declared field (`tape`), so its plan differs: a batch holds rows of two plans,
//!   put back in message order when it is taken (every 4096 messages: a rare schema change,
//!   magnified; alternating: the worst case).
//!
//! Both go through `Box<dyn Decoder>` as the engine's partitions do, taking each full batch.
//! Rounds alternate between the variants; the table gives each one's best and median round.
//!
//! `cargo run --release -p weir-codec --example registry_bench [-- MESSAGES ROUNDS]`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use weir_codec::registry::{
    FramedProtoDecoder, PlanSource, SchemaIdError, SchemaPlan, TargetColumns,
};
use weir_codec::{
    default_columns, strip_confluent, Decoder, ProtoDecoder, ProtoDecoderOptions, ProtoSchema,
};
use weir_testdata::{QuoteGenerator, QUOTE_MESSAGE, STOCKS_PROTO};

/// Plans compiled in advance, by id (what the engine's cache holds once an id has been seen).
struct Compiled(Vec<(u32, Arc<SchemaPlan>)>);

impl PlanSource for Compiled {
    fn plan(&self, id: u32, _indexes: &[u8]) -> Result<Arc<SchemaPlan>, SchemaIdError> {
        self.0
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, p)| Arc::clone(p))
            .ok_or_else(|| {
                SchemaIdError::unavailable(id, "the benchmark's plans", "not registered")
            })
    }
}

/// Every message's bytes in one buffer, and where each ends.
struct Corpus {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Corpus {
    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&e| {
            let m = &self.bytes[start..e];
            start = e;
            m
        })
    }
}

fn corpus(n: usize, id_of: impl Fn(usize) -> u32) -> Corpus {
    let mut g = QuoteGenerator::new(weir_testdata::DEFAULT_SEED);
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(n);
    let mut payload = Vec::new();
    for i in 0..n {
        payload.clear();
        g.next_quote().encode_protobuf(&mut payload);
        bytes.push(0);
        bytes.extend_from_slice(&id_of(i).to_be_bytes());
        bytes.push(0); // the message-index list [0]
        bytes.extend_from_slice(&payload);
        ends.push(bytes.len());
    }
    Corpus { bytes, ends }
}

/// One pass: nanoseconds per message.
fn run(decoder: &mut dyn Decoder, corpus: &Corpus, strip: bool) -> f64 {
    let start = Instant::now();
    let mut rows = 0;
    for m in corpus.iter() {
        let payload = if strip {
            strip_confluent(m, true).expect("framed").0
        } else {
            m
        };
        decoder.decode(payload).expect("decodes");
        if let Some(b) = decoder.take_full_batch() {
            rows += b.num_rows();
            black_box(b);
        }
    }
    if let Some(b) = decoder.flush() {
        rows += b.num_rows();
        black_box(b);
    }
    assert_eq!(rows, corpus.ends.len());
    start.elapsed().as_nanos() as f64 / corpus.ends.len() as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = args.first().copied().unwrap_or(1_000_000);
    let rounds = args.get(1).copied().unwrap_or(9);

    let dir = std::env::temp_dir().join(format!("weir-registry-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let proto = dir.join("stocks.proto");
    std::fs::write(&proto, STOCKS_PROTO).unwrap();
    let local = ProtoSchema::load(&proto, &[]).unwrap();
    let columns = default_columns(&local, QUOTE_MESSAGE).unwrap();
    let options = ProtoDecoderOptions::default();
    let local_decoder = ProtoDecoder::new(&local, QUOTE_MESSAGE, &columns, options).unwrap();

    // The registry's text of the same schema, and a second version with one more field.
    let v1 = ProtoSchema::from_sources(&[("stocks.proto", STOCKS_PROTO)], "stocks.proto").unwrap();
    let added = STOCKS_PROTO.replacen(
        "message QuoteNBBO {",
        "message QuoteNBBO {\n  string venue_added_later = 900;",
        1,
    );
    assert_ne!(
        added, STOCKS_PROTO,
        "stocks.proto changed: adjust the benchmark"
    );
    let v2 = ProtoSchema::from_sources(&[("stocks.proto", &added)], "stocks.proto").unwrap();
    let renumbered = STOCKS_PROTO.replacen("uint32 tape = 10;", "uint32 tape = 11;", 1);
    assert_ne!(
        renumbered, STOCKS_PROTO,
        "stocks.proto changed: adjust the benchmark"
    );
    let v3 = ProtoSchema::from_sources(&[("stocks.proto", &renumbered)], "stocks.proto").unwrap();
    let target = TargetColumns::new(&columns, 1, &v1, QUOTE_MESSAGE, options).unwrap();
    let plans = Arc::new(Compiled(vec![
        (
            1,
            Arc::new(SchemaPlan::compile(&target, 1, &v1, QUOTE_MESSAGE).unwrap()),
        ),
        (
            2,
            Arc::new(SchemaPlan::compile(&target, 2, &v2, QUOTE_MESSAGE).unwrap()),
        ),
        (
            3,
            Arc::new(SchemaPlan::compile(&target, 3, &v3, QUOTE_MESSAGE).unwrap()),
        ),
    ]));

    let one = corpus(n, |_| 1);
    let added_alternating = corpus(n, |i| 1 + (i % 2) as u32);
    let plans_4096 = corpus(n, |i| if (i / 4096) % 2 == 0 { 1 } else { 3 });
    let plans_alternating = corpus(n, |i| if i % 2 == 0 { 1 } else { 3 });
    let bytes = one.bytes.len() as f64 / n as f64;

    let registry = [&one, &added_alternating, &plans_4096, &plans_alternating];
    let mut times: [Vec<f64>; 5] = Default::default();
    for _ in 0..rounds {
        let mut d: Box<dyn Decoder> = Box::new(local_decoder.fresh());
        times[0].push(run(d.as_mut(), &one, true));
        for (t, corpus) in times[1..].iter_mut().zip(registry) {
            let mut d: Box<dyn Decoder> = Box::new(FramedProtoDecoder::new(
                Arc::clone(&plans) as Arc<dyn PlanSource>,
                target.schema(),
                options.batch_size,
            ));
            t.push(run(d.as_mut(), corpus, false));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "{n} framed stocks.QuoteNBBO messages ({bytes:.1} bytes each, {} columns), {rounds} rounds, one thread",
        columns.len()
    );
    println!();
    println!("| path | best ns/msg | median ns/msg | best vs local | median vs local |");
    println!("|---|---:|---:|---:|---:|");
    let base = median(&mut times[0].clone());
    let base_best = times[0].iter().copied().fold(f64::INFINITY, f64::min);
    for (name, t) in [
        "local .proto + confluent.wire",
        "registry, one schema id",
        "registry, two versions alternating (an added field)",
        "registry, two plans switching every 4096",
        "registry, two plans alternating",
    ]
    .iter()
    .zip(times.iter_mut())
    {
        let best = t.iter().copied().fold(f64::INFINITY, f64::min);
        let med = median(t);
        println!(
            "| {name} | {best:.1} | {med:.1} | {:+.1}% | {:+.1}% |",
            (best / base_best - 1.0) * 100.0,
            (med / base - 1.0) * 100.0
        );
    }
}
