#!/usr/bin/env bash
# The dedup benchmark: the quote stream with about 10% exact repeats, keyed on
# (ticker, sequence_number), decoded alone and decoded + deduplicated against a RocksDB state
# that ends up holding about 10,000,000 distinct keys, in one process (crates/weir/examples/
# dedup_bench.rs). Prints the times, the overhead, and the state's cache statistics.
#
#   scripts/bench_dedup.sh [extra flags for dedup_bench: --messages N --block-cache 256MB ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-release-target}"
cargo build --release --locked -p weir --example dedup_bench >&2
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo
exec "$CARGO_TARGET_DIR/release/examples/dedup_bench" "$@"
