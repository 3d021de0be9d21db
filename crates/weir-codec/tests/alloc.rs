//! Decoding allocates per batch, not per message: counted with a global allocator, for the
//! protobuf, JSON and Avro decoders; and the JSON and protobuf encoders allocate nothing once
//! their buffers are sized. A binary of its own, since it installs the allocator; the count
//! is kept per thread, so the two tests may run at once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampNanosecondType, UInt32Type};
use weir_codec::{
    AvroDecoder, AvroDecoderOptions, AvroPlan, AvroPlanSource, AvroSchema, ColumnSpec, DataType,
    Decoder, Encoder, FramedAvroDecoder, JsonDecoder, JsonDecoderOptions, JsonEncoder,
    ProtoDecoder, ProtoDecoderOptions, ProtoEncoder, ProtoSchema, RecordBatch, SchemaIdError,
    TimeUnit,
};

struct Counting;

thread_local! {
    /// Allocations (and reallocations) made by this thread.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down has no counter left; it is not one of the tests'.
    let _ = ALLOCS.try_with(|n| n.set(n.get() + 1));
}

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged;
// the counter is a const-initialised thread local, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` was allocated by `System` with layout `l` (every allocation goes there).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`; `n` is the caller's valid new size.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Decodes `msgs`, cycled, as a million rows, spot-checks the first full batch with `check`
/// (allocations there are per batch too), and asserts that decoding allocated per batch, not per
/// message.
fn per_batch_only(dec: &mut dyn Decoder, msgs: &[Vec<u8>], check: impl Fn(&RecordBatch)) {
    const N: usize = 1_000_000;
    let (mut batches, mut rows, mut checked) = (0usize, 0usize, false);
    let before = allocs();
    for i in 0..N {
        dec.decode(&msgs[i % msgs.len()]).unwrap();
        if let Some(batch) = dec.take_full_batch() {
            batches += 1;
            rows += batch.num_rows();
            if !checked {
                check(&batch);
                checked = true;
            }
        }
    }
    if let Some(b) = dec.flush() {
        batches += 1;
        rows += b.num_rows();
    }
    let allocs = allocs() - before;
    assert_eq!(rows, N);
    assert!(checked);
    let per_msg = allocs as f64 / N as f64;
    eprintln!("{allocs} allocations for {N} messages in {batches} batches ({per_msg:.5}/message)");
    assert!(per_msg < 0.01, "{per_msg} allocations per message");
}

// ---------------------------------------------------------------------------------------------
// protobuf
// ---------------------------------------------------------------------------------------------
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// One QuoteNBBO, encoded by hand so the test needs no generated code.
fn proto_quote(i: u64, out: &mut Vec<u8>) {
    let mut base = Vec::new();
    let ticker = format!("O:SPY{:06}C{:08}", 250000 + i % 10_000, i % 977);
    base.push(0x0a);
    varint(&mut base, ticker.len() as u64);
    base.extend_from_slice(ticker.as_bytes());
    base.push(0x10);
    varint(&mut base, 1_790_000_000_000_000_000 + i);
    base.push(0x18);
    varint(&mut base, i);
    out.push(0x0a);
    varint(out, base.len() as u64);
    out.extend_from_slice(&base);
    out.push(0x11);
    out.extend_from_slice(&(1.0 + i as f64 / 100.0).to_le_bytes());
    out.push(0x18);
    varint(out, i % 500 + 1);
    out.push(0x29);
    out.extend_from_slice(&(2.0 + i as f64 / 100.0).to_le_bytes());
    out.push(0x40);
    varint(out, (-((i % 3) as i64)) as u64);
}

#[test]
fn a_million_messages_allocate_per_batch() {
    let stocks = [("stocks.proto", weir_testdata::STOCKS_PROTO)];
    let schema = ProtoSchema::from_sources(&stocks, "stocks.proto").unwrap();
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Int64).with_path("base.timestamp"),
        ColumnSpec::new("sequence_number", DataType::Int64),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("conditions", DataType::Int32),
    ];
    let mut dec = ProtoDecoder::new(
        &schema,
        "stocks.QuoteNBBO",
        &cols,
        ProtoDecoderOptions::default(),
    )
    .unwrap();

    // 1000 distinct messages, cycled: the input is built before counting starts.
    let msgs: Vec<Vec<u8>> = (0..1000u64)
        .map(|i| {
            let mut b = Vec::new();
            proto_quote(i, &mut b);
            b
        })
        .collect();
    per_batch_only(&mut dec, &msgs, |batch| {
        let t = batch.column(0).as_string::<i32>();
        assert_eq!(t.value(5), "O:SPY250005C00000005");
        assert_eq!(
            batch.column(1).as_primitive::<Int64Type>().value(7),
            1_790_000_000_000_000_007
        );
        assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(9), 9);
        assert_eq!(batch.column(3).as_primitive::<Float64Type>().value(3), 1.03);
        assert_eq!(batch.column(4).as_primitive::<UInt32Type>().value(3), 4);
        assert_eq!(batch.column(6).as_primitive::<Int32Type>().value(2), -2);
    });
}

/// The registry path: framed messages through `FramedProtoDecoder`, one schema id, then two ids
/// switching every 4096 messages (a switch allocates nothing; a batch of two plans' rows is put
/// together once, when taken).
#[test]
fn a_million_framed_messages_allocate_per_batch() {
    use std::sync::Arc;
    use weir_codec::registry::{FramedProtoDecoder, PlanSource, SchemaPlan, TargetColumns};

    struct Plans(Vec<Arc<SchemaPlan>>);
    impl PlanSource for Plans {
        fn plan(&self, id: u32, _: &[u8]) -> Result<Arc<SchemaPlan>, SchemaIdError> {
            Ok(Arc::clone(&self.0[id as usize - 1]))
        }
    }
    let stocks = [("stocks.proto", weir_testdata::STOCKS_PROTO)];
    let schema = ProtoSchema::from_sources(&stocks, "stocks.proto").unwrap();
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8),
        ColumnSpec::new("sequence_number", DataType::Int64),
        ColumnSpec::new("bid_price", DataType::Float64),
    ];
    let options = ProtoDecoderOptions::default();
    let target = TargetColumns::new(&cols, 1, &schema, "stocks.QuoteNBBO", options).unwrap();
    let plans = Arc::new(Plans(
        (1..=2)
            .map(|id| {
                Arc::new(SchemaPlan::compile(&target, id, &schema, "stocks.QuoteNBBO").unwrap())
            })
            .collect(),
    ));
    for switching in [false, true] {
        let msgs: Vec<Vec<u8>> = (0..8192u64)
            .map(|i| {
                let id: u32 = if switching && (i / 4096) % 2 == 1 {
                    2
                } else {
                    1
                };
                let mut b = vec![0];
                b.extend_from_slice(&id.to_be_bytes());
                b.push(0);
                proto_quote(i, &mut b);
                b
            })
            .collect();
        let mut dec = FramedProtoDecoder::new(
            Arc::clone(&plans) as Arc<dyn PlanSource>,
            target.schema(),
            options.batch_size,
        );
        per_batch_only(&mut dec, &msgs, |batch| {
            let t = batch.column(0).as_string::<i32>();
            assert_eq!(t.value(5), "O:SPY250005C00000005");
            assert_eq!(
                batch.column(1).as_primitive::<Int64Type>().value(5000),
                5000
            );
        });
    }
}

// ---------------------------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------------------------

/// One quote as JSON, with an escaped string and keys nobody asked for.
fn json_quote(i: u64) -> String {
    format!(
        r#"{{"base": {{"ticker": "O:SPY{:06}C{:08}", "timestamp": {}, "sequence_number": {i}}}, "bid_price": {}, "bid_size": {}, "note": "caf\u00e9 \"{i}\"", "ask_price": {}, "extra": [1, {{"x": null}}], "conditions": -{}}}"#,
        250000 + i % 10_000,
        i % 977,
        1_790_000_000_000_000_000 + i,
        1.0 + i as f64 / 100.0,
        i % 500 + 1,
        2.0 + i as f64 / 100.0,
        i % 3
    )
}

#[test]
fn a_million_json_messages_allocate_per_batch() {
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None))
            .with_path("base.timestamp"),
        ColumnSpec::new("sequence_number", DataType::Int64).with_path("base.sequence_number"),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("note", DataType::Utf8),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("conditions", DataType::Int64),
    ];
    let mut dec = JsonDecoder::new(&cols, JsonDecoderOptions::default()).unwrap();

    // 1000 distinct messages, cycled: the input is built before counting starts.
    let msgs: Vec<Vec<u8>> = (0..1000u64).map(|i| json_quote(i).into_bytes()).collect();
    per_batch_only(&mut dec, &msgs, |batch| {
        let t = batch.column(0).as_string::<i32>();
        assert_eq!(t.value(5), "O:SPY250005C00000005");
        assert_eq!(
            batch
                .column(1)
                .as_primitive::<TimestampNanosecondType>()
                .value(7),
            1_790_000_000_000_000_007
        );
        assert_eq!(batch.column(2).as_primitive::<Int64Type>().value(9), 9);
        assert_eq!(batch.column(3).as_primitive::<Float64Type>().value(3), 1.03);
        assert_eq!(batch.column(4).as_primitive::<UInt32Type>().value(3), 4);
        assert_eq!(
            batch.column(5).as_string::<i32>().value(2),
            "caf\u{e9} \"2\""
        );
        assert_eq!(batch.column(7).as_primitive::<Int64Type>().value(2), -2);
    });
}

// ---------------------------------------------------------------------------------------------
// avro
// ---------------------------------------------------------------------------------------------

/// The quotes as Avro (`stocks.avsc`), every field read, `base` through paths.
fn avro_columns() -> Vec<ColumnSpec> {
    vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None))
            .with_path("base.timestamp"),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::Int64),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("conditions", DataType::Int32),
        ColumnSpec::new("tape", DataType::Int64),
    ]
}

fn avro_quotes() -> Vec<Vec<u8>> {
    let mut g = weir_testdata::QuoteGenerator::new(5);
    (0..1000)
        .map(|_| {
            let mut m = Vec::new();
            g.next_quote().encode_avro(&mut m);
            m
        })
        .collect()
}

#[test]
fn a_million_avro_messages_allocate_per_batch() {
    let schema = AvroSchema::parse(weir_testdata::STOCKS_AVSC).unwrap();
    let mut dec =
        AvroDecoder::new(&schema, &avro_columns(), AvroDecoderOptions::default()).unwrap();
    let msgs = avro_quotes();
    let first = weir_testdata::QuoteGenerator::new(5)
        .next_quote()
        .ticker
        .to_string();
    per_batch_only(&mut dec, &msgs, |batch| {
        assert_eq!(batch.column(0).as_string::<i32>().value(0), first);
        assert_eq!(batch.num_columns(), 7);
    });
}

/// Two schema ids, alternating message by message: switching plans allocates nothing either.
#[test]
fn a_million_registry_framed_avro_messages_allocate_per_batch() {
    struct Two(std::sync::Arc<AvroPlan>);
    impl AvroPlanSource for Two {
        fn plan(&self, _id: u32) -> Result<std::sync::Arc<AvroPlan>, SchemaIdError> {
            Ok(std::sync::Arc::clone(&self.0))
        }
    }
    let schema = AvroSchema::parse(weir_testdata::STOCKS_AVSC).unwrap();
    let options = AvroDecoderOptions::default();
    let plan = |id| {
        std::sync::Arc::new(
            AvroPlan::compile(&schema, None, id, &avro_columns(), true, options).unwrap(),
        )
    };
    let mut dec = FramedAvroDecoder::new(std::sync::Arc::new(Two(plan(2))), plan(1), 8192);
    let msgs: Vec<Vec<u8>> = avro_quotes()
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let mut m = vec![0, 0, 0, 0, 1 + (i % 2) as u8];
            m.extend_from_slice(&body);
            m
        })
        .collect();
    per_batch_only(&mut dec, &msgs, |batch| {
        assert_eq!(batch.num_columns(), 7);
    });
}

// ---------------------------------------------------------------------------------------------
// encoders
// ---------------------------------------------------------------------------------------------

/// Encodes one batch of 8192 quotes 123 times (a million rows) into reused buffers and asserts
/// that, once the first batch has sized its buffers, the encoder allocates nothing at all:
/// neither per row nor per batch (flat columns without nulls; a column with nulls may take a
/// few per batch).
fn encodes_without_allocating(encoder: &mut dyn Encoder, batch: &RecordBatch) {
    const BATCHES: usize = 123;
    let (mut out, mut ends) = (Vec::new(), Vec::new());
    // The first batch sizes the buffers.
    encoder.encode_batch(batch, &mut out, &mut ends).unwrap();
    let written = out.len();
    let before = allocs();
    for _ in 0..BATCHES {
        out.clear();
        ends.clear();
        encoder.encode_batch(batch, &mut out, &mut ends).unwrap();
    }
    let allocs = allocs() - before;
    assert_eq!((out.len(), ends.len()), (written, batch.num_rows()));
    let rows = BATCHES * batch.num_rows();
    eprintln!("{allocs} allocations encoding {rows} rows in {BATCHES} batches");
    assert_eq!(allocs, 0, "{allocs} allocations for {rows} rows");
}

/// One batch of 8192 quotes: ticker, a nanosecond timestamp, the sequence number, the bid's
/// price and size, the ask's price and the conditions.
fn quote_batch() -> RecordBatch {
    let stocks = [("stocks.proto", weir_testdata::STOCKS_PROTO)];
    let schema = ProtoSchema::from_sources(&stocks, "stocks.proto").unwrap();
    let cols = vec![
        ColumnSpec::new("ticker", DataType::Utf8).with_path("base.ticker"),
        ColumnSpec::new("timestamp", DataType::Timestamp(TimeUnit::Nanosecond, None))
            .with_path("base.timestamp"),
        ColumnSpec::new("sequence_number", DataType::Int64),
        ColumnSpec::new("bid_price", DataType::Float64),
        ColumnSpec::new("bid_size", DataType::UInt32),
        ColumnSpec::new("ask_price", DataType::Float64),
        ColumnSpec::new("conditions", DataType::Int32),
    ];
    let mut dec = ProtoDecoder::new(
        &schema,
        "stocks.QuoteNBBO",
        &cols,
        ProtoDecoderOptions::default(),
    )
    .unwrap();
    let mut msg = Vec::new();
    for i in 0..8192u64 {
        msg.clear();
        proto_quote(i, &mut msg);
        dec.decode(&msg).unwrap();
    }
    dec.take_full_batch().unwrap()
}

#[test]
fn encoders_allocate_nothing_once_their_buffers_are_sized() {
    let batch = quote_batch();
    let mut json = JsonEncoder::new(batch.schema().fields()).unwrap();
    encodes_without_allocating(&mut json, &batch);

    let stocks = [("stocks.proto", weir_testdata::STOCKS_PROTO)];
    let schema = ProtoSchema::from_sources(&stocks, "stocks.proto").unwrap();
    let message = schema
        .pool()
        .get_message_by_name("stocks.QuoteNBBO")
        .unwrap();
    // The protobuf encoder binds by field name: the flat columns the encoder can place.
    let flat = batch.project(&[3, 4, 5, 6]).unwrap();
    let mut proto = ProtoEncoder::new(&message, flat.schema().fields()).unwrap();
    encodes_without_allocating(&mut proto, &flat);
}
