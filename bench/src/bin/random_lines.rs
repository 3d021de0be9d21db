//! What one dedup key costs in memory traffic on this machine, without weir: the floor under
//! `StateStore::dedup`.
//!
//! A new key reads and updates one random 64-byte block of the key filter (about 2 bytes a key
//! of state, so tens of MiB) and one random slot of the recent-key set (hundreds of MiB). This
//! replays exactly that access pattern on plain arrays of the same sizes, with the same
//! prefetch distance (16 keys ahead), and prints nanoseconds per key for: the filter alone, the
//! set alone, both, and a sequential append (the step's key list) as the reference.
//!
//! ```text
//! cargo run --release --bin random_lines [-- FILTER_MIB SET_MIB KEYS]   (defaults 24 128 2000000)
//! ```

use std::hint::black_box;
use std::time::Instant;

const AHEAD: usize = 16;

#[derive(Clone, Copy, Default)]
#[allow(dead_code)] // written whole, as the real slot is; only `lo` is read back
struct Slot {
    lo: u64,
    hi: u64,
    time: i64,
    _pad: u64,
}

fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// SplitMix64: the keys' two hash words.
fn keys(n: usize) -> Vec<(u64, u64)> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..n).map(|_| (next() | 1, next())).collect()
}

/// What each key touches.
#[derive(Clone, Copy, PartialEq)]
enum Touch {
    ListOnly,
    Filter,
    Set,
    BothInOneLoop,
    BothInALoopEach,
}

fn run(name: &str, filter_mib: usize, set_mib: usize, n: usize, touch: Touch) {
    let use_filter = matches!(
        touch,
        Touch::Filter | Touch::BothInOneLoop | Touch::BothInALoopEach
    );
    let use_set = matches!(
        touch,
        Touch::Set | Touch::BothInOneLoop | Touch::BothInALoopEach
    );
    let two_passes = touch == Touch::BothInALoopEach;
    let blocks = ((filter_mib << 20) / 64).next_power_of_two();
    let slots = ((set_mib << 20) / 32).next_power_of_two();
    assert!(n * 2 <= slots, "the set would be over half full");
    // Every page touched before the clock starts: first-touch faults are not what is measured.
    let mut filter = vec![[1u64; 8]; blocks];
    filter.fill([0; 8]);
    let mut set = vec![Slot::default(); slots];
    let mut list: Vec<(u64, u64)> = vec![(1, 1); n];
    list.clear();
    let ks = keys(n);
    let block = |lo: u64| (lo.rotate_right(32) as usize) & (blocks - 1);
    let slot = |lo: u64| (lo as usize) & (slots - 1);
    let t = Instant::now();
    let mut new = 0usize;
    let filter_probe = |filter: &mut Vec<[u64; 8]>, lo: u64, hi: u64| {
        let b = &mut filter[block(lo)];
        let mut missing = 0;
        let mut bits = [0u64; 8];
        for (w, bit) in bits.iter_mut().enumerate() {
            *bit = 1 << (hi.wrapping_mul(0x9E37_79B9_7F4A_7C15 ^ w as u64) >> 58);
            missing |= *bit & !b[w];
        }
        for (w, bit) in bits.iter().enumerate() {
            b[w] |= bit;
        }
        missing != 0
    };
    let set_insert = |set: &mut Vec<Slot>, i: usize, lo: u64, hi: u64| {
        let mut j = slot(lo);
        while set[j].lo != 0 {
            j = (j + 1) & (slots - 1);
        }
        set[j] = Slot {
            lo,
            hi,
            time: i as i64,
            _pad: 0,
        };
    };
    // Batches of 8192 keys, as StateStore::dedup sees them.
    let mut fresh = vec![true; 8192];
    for (c, chunk) in ks.chunks(8192).enumerate() {
        let base = c * 8192;
        if two_passes {
            for (r, &(lo, hi)) in chunk.iter().enumerate() {
                if let Some(&(lo, _)) = chunk.get(r + AHEAD) {
                    prefetch(&filter[block(lo)]);
                }
                fresh[r] = filter_probe(&mut filter, lo, hi);
            }
            for (r, &(lo, hi)) in chunk.iter().enumerate() {
                if let Some(&(lo, _)) = chunk.get(r + AHEAD) {
                    prefetch(&set[slot(lo)]);
                }
                if fresh[r] {
                    new += 1;
                    set_insert(&mut set, base + r, lo, hi);
                    list.push((lo, hi));
                }
            }
            continue;
        }
        for (r, &(lo, hi)) in chunk.iter().enumerate() {
            if let Some(&(lo, _)) = chunk.get(r + AHEAD) {
                if use_filter {
                    prefetch(&filter[block(lo)]);
                }
                if use_set {
                    prefetch(&set[slot(lo)]);
                }
            }
            if !use_filter || filter_probe(&mut filter, lo, hi) {
                new += 1;
                if use_set {
                    set_insert(&mut set, base + r, lo, hi);
                }
                list.push((lo, hi));
            }
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    black_box((&filter, &set, &list));
    println!("| {name} | {ns:.1} | {new} |");
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("FILTER_MIB SET_MIB KEYS are numbers"))
        .collect();
    let filter_mib = args.first().copied().unwrap_or(24);
    let set_mib = args.get(1).copied().unwrap_or(128);
    let n = args.get(2).copied().unwrap_or(2_000_000);
    println!(
        "{n} random keys; filter {filter_mib} MiB, set {set_mib} MiB, prefetch {AHEAD} keys ahead"
    );
    println!();
    println!("| per key | ns | new |");
    println!("|---|---|---|");
    for (name, touch) in [
        ("append to the key list only", Touch::ListOnly),
        ("filter block (read + set bits)", Touch::Filter),
        ("set slot (probe + write)", Touch::Set),
        ("filter block and set slot, one loop", Touch::BothInOneLoop),
        (
            "filter block and set slot, a loop each",
            Touch::BothInALoopEach,
        ),
    ] {
        run(name, filter_mib, set_mib, n, touch);
    }
}
