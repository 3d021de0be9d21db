#!/usr/bin/env bash
# The decoder benchmark reports: weir against its peers on the same inputs, one thread, release.
# Prints Markdown tables for BENCHMARKS.md: the protobuf decoder, the JSON decoder, then the Avro
# decoder. Criterion runs: (cd bench && cargo bench --bench protobuf; cargo bench --bench json).
set -euo pipefail
cd "$(dirname "$0")/../bench"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-bench-target}"
echo "date: $(date -u +%Y-%m-%d)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
cargo run --release --locked --bin report -- "$@"
cargo run --release --locked --bin json_report
cargo run --release --locked --bin avro_report
