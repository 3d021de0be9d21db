#!/usr/bin/env bash
# The main job on the embedded default (no broker): generates the options quotes into a temporary
# directory, runs their CREATE SOURCE on the file connector and a GROUP BY ticker query,
# and prints the top groups and the throughput. Arguments go to `weir demo` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
ensure_libclang
exec cargo run --release --locked -p weir -- demo "$@"
