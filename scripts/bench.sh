#!/usr/bin/env bash
# The decoder benchmark report: weir against its peers on the same inputs, one thread, release.
# Prints a Markdown table for BENCHMARKS.md. Criterion runs: (cd bench && cargo bench).
set -euo pipefail
cd "$(dirname "$0")/../bench"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-bench-target}"
echo "date: $(date -u +%Y-%m-%d)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
cargo run --release --locked --bin report -- "$@"
