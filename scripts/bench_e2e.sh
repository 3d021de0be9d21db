#!/usr/bin/env bash
# The options-quotes workload end to end: N quotes (20,000,000 by default, about 1.4 GB) from the file
# source, `SELECT ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) ... GROUP BY
# ticker` (10,000 groups), with the built-in descriptor-driven decoder and with the custom-decoder
# example's hand-written prost decoder registered as `custom.proto+stocks.QuoteNBBO`, on 2 partitions and
# on 1. Each variant runs in its own process under /usr/bin/time for its peak RSS; the table
# gives the fastest of WEIR_E2E_RUNS (3) runs, since other work on the machine only slows a run.
#
#   scripts/bench_e2e.sh [COUNT]        (WEIR_E2E_DIR: where the data goes, default /tmp/weir-e2e)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-20000000}"
DIR="${WEIR_E2E_DIR:-/tmp/weir-e2e}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-release-target}"
cargo build --release --locked -p weir --bin weir --example custom_decoder >&2
BIN="$CARGO_TARGET_DIR/release"
mkdir -p "$DIR"
DATA="$DIR/quotes-$COUNT.bin"
if [ ! -s "$DATA" ]; then
  "$BIN/weir" gen quotes --count "$COUNT" --out "$DATA.tmp" --schema-dir "$DIR/descriptors" >&2
  mv "$DATA.tmp" "$DATA"
fi
[ -s "$DIR/descriptors/stocks.pb" ] || "$BIN/weir" gen quotes --count 1 --out "$DIR/one.bin" --schema-dir "$DIR/descriptors" >&2
BYTES=$(stat -c %s "$DATA")
cat > "$DIR/e2e.sql" <<SQL
CREATE SOURCE opra_quotes (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, ...)
WITH ('connector' = 'file', 'path' = '$DATA', 'encoding' = 'protobuf',
      'message' = 'stocks.QuoteNBBO', 'location' = '$DIR/descriptors/stocks.pb');
SELECT ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) FROM opra_quotes GROUP BY ticker;
SQL

RUNS="${WEIR_E2E_RUNS:-3}"
row() { # name partitions command...: the fastest of $RUNS runs, and the largest peak RSS
  local name=$1 parts=$2; shift 2
  local out secs="" kb=0 s k
  for _ in $(seq "$RUNS"); do
    out=$( { /usr/bin/time -f "TIME %e %M" "$@" >/dev/null; } 2>&1 ) || { echo "$out" >&2; exit 1; }
    read -r s k < <(echo "$out" | awk '/^TIME/ {print $2, $3}')
    if [ -z "$secs" ] || awk -v a="$s" -v b="$secs" 'BEGIN {exit !(a < b)}'; then secs=$s; fi
    [ "$k" -gt "$kb" ] && kb=$k
  done
  awk -v n="$name" -v p="$parts" -v s="$secs" -v kb="$kb" -v c="$COUNT" -v b="$BYTES" 'BEGIN {
    printf "| %s | %d | %.2f | %.2f | %.0f | %.0f |\n", n, p, s, c / s / 1e6, b / s / 1e6, kb / 1024 }'
}

echo "best of $RUNS runs; $COUNT quotes, $(awk -v b="$BYTES" 'BEGIN {printf "%.2f GB", b/1e9}'), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo
echo "| decoder | partitions | seconds | M msg/s | MB/s | peak RSS (MiB) |"
echo "|---|---|---|---|---|---|"
for parts in 2 1; do
  row "weir, built-in protobuf (\`weir run\`)" $parts "$BIN/weir" run --quiet --partitions $parts "$DIR/e2e.sql"
  row "custom prost decoder (example)" $parts "$BIN/examples/custom_decoder" --file "$DATA" --encoding custom --partitions $parts
  row "weir, built-in protobuf (same harness)" $parts "$BIN/examples/custom_decoder" --file "$DATA" --encoding protobuf --partitions $parts
done
