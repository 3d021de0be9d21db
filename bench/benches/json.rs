//! Criterion benchmarks of the JSON decoders: `json_quote` (the protobuf benchmark's quotes as
//! JSON, four decoders), `json_order` (~2 KB nested events, four decoders) and `json_wide` (50
//! keys: weir and arrow-json with all 50 and with 5). Every iteration decodes the whole corpus
//! into 8192-row RecordBatches and drops them.
//!
//! `cd bench && cargo bench --bench json` (add `-- json_quote` to run one group).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use weir_bench::json::{self, OrderWorkload, QuoteJsonWorkload, WideJsonWorkload};
use weir_bench::{Contender, Corpus};

fn bench_group(
    c: &mut Criterion,
    name: &str,
    corpus: &Corpus,
    contenders: Vec<Box<dyn Contender>>,
) {
    eprintln!(
        "{name}: {} messages, {} bytes, {:.1} bytes/message on average",
        corpus.len(),
        corpus.total_bytes(),
        corpus.avg_message_size()
    );
    let mut group = c.benchmark_group(name);
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes(corpus.total_bytes() as u64));
    for mut contender in contenders {
        let id = contender.name().to_string();
        group.bench_function(id, |b| {
            b.iter(|| {
                let rows = contender.run_count(corpus).expect("decode");
                assert_eq!(rows, corpus.len());
                rows
            })
        });
    }
    group.finish();
}

fn json_quote(c: &mut Criterion) {
    let w = QuoteJsonWorkload::new(json::QUOTE_MESSAGES / 4).expect("quote workload");
    let contenders = w.contenders().expect("decoders");
    bench_group(c, "json_quote", &w.corpus, contenders);
}

fn json_order(c: &mut Criterion) {
    let w = OrderWorkload::new(json::ORDER_MESSAGES / 4);
    let contenders = w.contenders().expect("decoders");
    bench_group(c, "json_order", &w.corpus, contenders);
}

fn json_wide(c: &mut Criterion) {
    let w = WideJsonWorkload::new(json::WIDE_MESSAGES / 4);
    let contenders = w.contenders().expect("decoders");
    bench_group(c, "json_wide", &w.corpus, contenders);
}

criterion_group!(benches, json_quote, json_order, json_wide);
criterion_main!(benches);
