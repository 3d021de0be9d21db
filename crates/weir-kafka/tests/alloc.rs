//! In steady state the consumer allocates (almost) nothing per message: after a warm-up,
//! consuming 1,000,000 messages from a real broker must take fewer than 1,000 allocations in
//! total, uncompressed and zstd-compressed, in plaintext; over TLS (SASL_SSL, rustls's buffered
//! stream) fewer than 4 per TLS record, which carries hundreds of these messages. (Its own test
//! binary: the global allocator counts.)

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{bootstrap, config, topic};
use weir_kafka::{
    create_topic, Compression, Consumer, PollStatus, Producer, ProducerConfig, SecurityConfig,
};

/// The two tests share the allocation counter: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WARM_UP: usize = 100_000;
const MEASURED: usize = 1_000_000;
/// Produced past WARM_UP + MEASURED: counting starts at the first poll after the warm-up, and a
/// poll hands over a whole fetch.
const SLACK: usize = 300_000;

fn load(b: &str, t: &str, codec: Compression) {
    create_topic(&[b.to_string()], t, 4, 1, &[], false).unwrap();
    let mut p = Producer::connect(&ProducerConfig {
        brokers: vec![b.to_string()],
        topic: t.to_string(),
        compression: codec,
        batch_bytes: 256 << 10,
        ..ProducerConfig::default()
    })
    .unwrap();
    let mut value = [b'q'; VALUE];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..WARM_UP + MEASURED + SLACK {
        // Half the value is noise so compressed batches hold a realistic number of records.
        for chunk in value[..32].chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        value[32..40].copy_from_slice(&(i as u64).to_le_bytes());
        p.send(Some((i % 4) as i32), None, &value).unwrap();
    }
    p.flush().unwrap();
}

/// Value bytes of one message.
const VALUE: usize = 60;

fn measure(b: &str, t: &str, security: SecurityConfig) -> (usize, u64) {
    let mut c = Consumer::connect(&weir_kafka::ConsumerConfig {
        // Kafka's default per-partition fetch size, so there are many fetches to measure.
        partition_max_bytes: 1 << 20,
        security,
        ..config(b, t)
    })
    .unwrap();
    let mut n = 0usize;
    let mut checksum = 0u64;
    let mut counted = 0usize;
    loop {
        let status = c
            .poll(Duration::from_millis(500), |r| {
                // Read the value in place, as a decoder would.
                let v = r.value.unwrap_or_default();
                checksum = checksum.wrapping_add(v.len() as u64 + u64::from(v[0]));
                Ok::<(), std::io::Error>(())
            })
            .unwrap();
        match status {
            PollStatus::Records(k) => {
                n += k;
                if COUNTING.load(Ordering::Relaxed) {
                    counted += k;
                }
            }
            PollStatus::End => break,
            PollStatus::Idle => {}
        }
        if n >= WARM_UP && !COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.store(0, Ordering::Relaxed);
            COUNTING.store(true, Ordering::Relaxed);
        }
    }
    COUNTING.store(false, Ordering::Relaxed);
    assert_eq!(n, WARM_UP + MEASURED + SLACK);
    assert!(checksum > 0);
    (counted, ALLOCATIONS.load(Ordering::Relaxed))
}

#[test]
fn steady_state_consumption_allocates_almost_nothing() {
    let _serial = serial();
    let Some(b) = bootstrap("steady_state_consumption_allocates_almost_nothing") else {
        return;
    };
    for codec in [Compression::None, Compression::Zstd] {
        let t = topic(&format!("alloc-{}", codec.name()));
        load(&b, &t, codec);
        let (counted, allocations) = measure(&b, &t, SecurityConfig::default());
        assert!(
            counted >= MEASURED,
            "{codec:?}: only {counted} messages counted"
        );
        // Straight to the stderr handle so the figure shows in the test log (libtest captures
        // eprintln! of passing tests).
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "weir-kafka alloc: {}: {allocations} allocations while consuming {counted} messages \
             in steady state",
            codec.name()
        );
        assert!(
            allocations < 1_000,
            "{codec:?}: {allocations} allocations for {counted} messages"
        );
    }
}

#[test]
fn steady_state_consumption_over_tls_allocates_almost_nothing() {
    let _serial = serial();
    let test = "steady_state_consumption_over_tls_allocates_almost_nothing";
    let Some(b) = bootstrap(test) else {
        return;
    };
    let Ok(sasl_ssl) = std::env::var("WEIR_KAFKA_SASL_SSL") else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "NOTICE: {test} skipped: WEIR_KAFKA_SASL_SSL is not set (scripts/test.sh starts the \
             broker with secure listeners)"
        );
        return;
    };
    let var = |n: &str| std::env::var(n).unwrap_or_else(|_| panic!("{n} is not set"));
    let security = SecurityConfig::from_properties([
        ("security.protocol", "SASL_SSL".to_string()),
        ("sasl.mechanism", "SCRAM-SHA-512".to_string()),
        ("sasl.username", var("WEIR_KAFKA_SASL_USER")),
        ("sasl.password", var("WEIR_KAFKA_SASL_PASSWORD")),
        ("ssl.ca.location", var("WEIR_KAFKA_CA")),
    ])
    .unwrap();
    // Loaded in plaintext (faster), read over TLS: the same log either way.
    let t = topic("alloc-tls");
    load(&b, &t, Compression::None);
    let (counted, allocations) = measure(&sasl_ssl, &t, security);
    assert!(counted >= MEASURED, "only {counted} messages counted");
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "weir-kafka alloc: TLS: {allocations} allocations while consuming {counted} messages in \
         steady state"
    );
    // rustls's buffered stream allocates for each TLS record it decrypts (about 3 a record
    // here), and a record carries at most 16 KiB: over 200 of these messages. Fewer than 4 a
    // record is nothing per message; one a message would be over 50 times more.
    let records = counted * (VALUE + 16) / (16 << 10) + 1;
    assert!(
        allocations < 4 * records as u64,
        "TLS: {allocations} allocations for {counted} messages, about {records} TLS records"
    );
}
