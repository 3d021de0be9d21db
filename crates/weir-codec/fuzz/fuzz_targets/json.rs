//! cargo-fuzz target for the JSON decoder: the first byte picks a decoder, the rest is the
//! message.
#![no_main]

#[path = "../json_harness.rs"]
mod harness;

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;

static TARGETS: Mutex<Vec<harness::FuzzTarget>> = Mutex::new(Vec::new());

fuzz_target!(|data: &[u8]| {
    let Some((&pick, msg)) = data.split_first() else {
        return;
    };
    let mut targets = TARGETS.lock().unwrap_or_else(|p| p.into_inner());
    if targets.is_empty() {
        *targets = harness::targets();
    }
    let n = targets.len();
    harness::check(&mut targets[pick as usize % n], msg);
});
