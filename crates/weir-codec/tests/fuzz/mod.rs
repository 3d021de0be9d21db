//! A short, deterministic mutation-fuzz run over the seeded corpora (stable Rust). The harnesses
//! live in `fuzz/` beside the cargo-fuzz targets that share them: each is included here by
//! `#[path]`, once, rather than made a library, which would need a dependency cycle with this
//! crate and pull libfuzzer-sys into the stable build.

mod json;
mod protobuf;

/// A number from the environment, or `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
