//! A short, deterministic mutation-fuzz run of the JSON decoder over the seeded corpus
//! (`fuzz/corpus/json/`; stable Rust; part of the test suite). Longer runs:
//! `WEIR_FUZZ_ITERS=1000000 WEIR_FUZZ_SEED=7 cargo test --release -p weir-codec --test main fuzz::json
//! -- --nocapture`. Coverage-guided runs on nightly: see `fuzz/README.md`.

#[path = "../../fuzz/json_harness.rs"]
mod harness;

use harness::{check, mutate, seeds, targets, verify_batch, Rng};

use super::env_u64;

#[test]
fn mutated_json_never_breaks_the_decoder() {
    let iters = env_u64("WEIR_FUZZ_ITERS", 4000);
    let seed = env_u64("WEIR_FUZZ_SEED", 0x5eed);
    let mut rng = Rng::new(seed);
    let corpus = seeds();
    let mut all = targets();
    let (mut accepted, mut rejected) = (0u64, 0u64);
    for t in all.iter_mut() {
        // Every seed on its own first: every target accepts them all.
        for s in &corpus {
            assert!(check(t, s), "{}: a seed was rejected", t.name);
        }
        for i in 0..iters {
            let mut input = corpus[rng.index(corpus.len())].clone();
            mutate(&mut rng, &mut input, &corpus);
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(t, &input)));
            match result {
                Ok(true) => accepted += 1,
                Ok(false) => rejected += 1,
                Err(p) => {
                    eprintln!(
                        "target {} iteration {i} (seed {seed}) failed on input {:?}",
                        t.name,
                        String::from_utf8_lossy(&input)
                    );
                    std::panic::resume_unwind(p);
                }
            }
        }
        verify_batch(t);
    }
    eprintln!(
        "json fuzz: {} targets x {iters} inputs, seed {seed}: {accepted} accepted, {rejected} rejected",
        all.len()
    );
    // Mutations that keep the input valid must exist, or the run only tests the error path.
    assert!(accepted > 0 && rejected > 0);
}
