//! Criterion benchmarks: `quote_nbbo` (the options quote, 12 columns, four decoders) and `wide`
//! (a 50-field message, weir with all columns vs 5 columns, and ptars). Every iteration
//! decodes the whole corpus into 8192-row RecordBatches and drops them.
//!
//! `cd bench && cargo bench --bench protobuf` (add `-- quote_nbbo` or `-- wide` to run one).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use weir_bench::quote::{self, QuoteWorkload};
use weir_bench::wide::{self, WideWorkload};
use weir_bench::{Contender, Corpus};

fn bench_group(
    c: &mut Criterion,
    name: &str,
    corpus: &Corpus,
    contenders: Vec<Box<dyn Contender>>,
) {
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

fn quote_nbbo(c: &mut Criterion) {
    let w = QuoteWorkload::new(quote::MESSAGES).expect("quote workload");
    eprintln!(
        "quote_nbbo: {} messages, {} bytes, {:.1} bytes/message on average",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    let contenders = w.contenders().expect("quote decoders");
    bench_group(c, "quote_nbbo", &w.corpus, contenders);
}

fn wide(c: &mut Criterion) {
    let w = WideWorkload::new(wide::MESSAGES).expect("wide workload");
    eprintln!(
        "wide: {} messages, {} bytes, {:.1} bytes/message on average",
        w.corpus.len(),
        w.corpus.total_bytes(),
        w.corpus.avg_message_size()
    );
    let contenders = w.contenders().expect("wide decoders");
    bench_group(c, "wide", &w.corpus, contenders);
}

criterion_group!(benches, quote_nbbo, wide);
criterion_main!(benches);
