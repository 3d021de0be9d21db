//! A short, deterministic mutation-fuzz run over the seeded corpus (stable Rust; part of the test
//! suite). Longer runs: `WEIR_FUZZ_ITERS=1000000 WEIR_FUZZ_SEED=7 cargo test --release -p
//! weir-codec --test main fuzz::protobuf -- --nocapture`. Coverage-guided runs on nightly: see `fuzz/README.md`.

#[path = "../../fuzz/harness.rs"]
mod harness;

use harness::{check, mutate, targets, verify_batch, Rng};

use super::env_u64;

#[test]
fn mutated_messages_never_break_the_decoder() {
    let iters = env_u64("WEIR_FUZZ_ITERS", 4000);
    let seed = env_u64("WEIR_FUZZ_SEED", 0x5eed);
    let mut rng = Rng::new(seed);
    let mut all = targets();
    let mut rejected = 0u64;
    for t in all.iter_mut() {
        // Every seed on its own first: they must all decode.
        for s in t.seeds.clone() {
            assert!(check(t, &s), "{}: a seed was rejected", t.name);
        }
        for i in 0..iters {
            let mut input = t.seeds[rng.index(t.seeds.len())].clone();
            mutate(&mut rng, &mut input, &t.seeds);
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(t, &input)));
            let accepted = match result {
                Ok(a) => a,
                Err(p) => {
                    eprintln!(
                        "target {} iteration {i} (seed {seed}) failed on input {:02x?}",
                        t.name, input
                    );
                    std::panic::resume_unwind(p);
                }
            };
            if !accepted {
                rejected += 1;
            }
        }
        verify_batch(t);
    }
    eprintln!(
        "fuzz: {} targets x {iters} inputs, seed {seed}, {rejected} rejected",
        all.len()
    );
}
