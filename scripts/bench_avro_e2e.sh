#!/usr/bin/env bash
# Avro against protobuf end to end: the same N quotes (20,000,000 by default) as protobuf, as
# binary Avro datums (stocks.avsc, varint-framed) and as Avro object container files with each
# block codec (null, deflate, snappy, zstandard), each from the file source through
# `SELECT ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) ... GROUP BY ticker`
# (10,000 groups), on 1 partition and on 2. The runs alternate between the variants; each
# runs in its own process under /usr/bin/time, and the table gives the fastest of
# WEIR_E2E_RUNS (3) runs and its ratio to protobuf's. WEIR_E2E_CONTAINERS lists the container
# codecs to run (default "none deflate snappy zstd"; empty for none).
#
#   scripts/bench_avro_e2e.sh [COUNT]     (WEIR_E2E_DIR: where the data goes, default /tmp/weir-e2e)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-20000000}"
DIR="${WEIR_E2E_DIR:-/tmp/weir-e2e}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-release-target}"
cargo build --release --locked -p weir --bin weir >&2
BIN="$CARGO_TARGET_DIR/release/weir"
mkdir -p "$DIR"
PB="$DIR/quotes-$COUNT.bin"
AV="$DIR/quotes-$COUNT.avro.bin"
[ -s "$PB" ] || { "$BIN" gen quotes --count "$COUNT" --out "$PB.tmp" --schema-dir "$DIR/descriptors" >&2; mv "$PB.tmp" "$PB"; }
[ -s "$AV" ] || { "$BIN" gen quotes --format avro --count "$COUNT" --out "$AV.tmp" --schema-dir "$DIR/descriptors" >&2; mv "$AV.tmp" "$AV"; }
[ -s "$DIR/descriptors/stocks.avsc" ] || "$BIN" gen quotes --count 1 --out "$DIR/one.bin" --schema-dir "$DIR/descriptors" >&2
QUERY="SELECT ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) FROM opra_quotes GROUP BY ticker;"
cat > "$DIR/e2e-protobuf.sql" <<SQL
CREATE SOURCE opra_quotes (ticker VARCHAR, bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED)
WITH ('connector' = 'file', 'path' = '$PB', 'encoding' = 'protobuf',
      'message' = 'stocks.QuoteNBBO', 'location' = '$DIR/descriptors/stocks.pb');
$QUERY
SQL
cat > "$DIR/e2e-avro.sql" <<SQL
CREATE SOURCE opra_quotes (ticker VARCHAR, bid_price DOUBLE, ask_price DOUBLE, bid_size BIGINT)
WITH ('connector' = 'file', 'path' = '$AV', 'encoding' = 'avro',
      'avro.schema.file' = '$DIR/descriptors/stocks.avsc', 'fields.ticker' = 'base.ticker');
$QUERY
SQL

CONTAINERS="${WEIR_E2E_CONTAINERS-none deflate snappy zstd}"
VARIANTS="protobuf avro"
for c in $CONTAINERS; do
  F="$DIR/quotes-$COUNT.$c.avro"
  [ -s "$F" ] || { "$BIN" gen quotes --format avro --framing avro-container --compression "$c" --count "$COUNT" --out "$F.tmp" >&2; mv "$F.tmp" "$F"; }
  cat > "$DIR/e2e-container-$c.sql" <<SQL
CREATE SOURCE opra_quotes (ticker VARCHAR, bid_price DOUBLE, ask_price DOUBLE, bid_size BIGINT)
WITH ('connector' = 'file', 'path' = '$F', 'encoding' = 'avro', 'fields.ticker' = 'base.ticker');
$QUERY
SQL
  VARIANTS="$VARIANTS container-$c"
done

RUNS="${WEIR_E2E_RUNS:-3}"
secs() { # command...: wall seconds of one run
  local out
  out=$( { /usr/bin/time -f "TIME %e" "$@" >/dev/null; } 2>&1 ) || { echo "$out" >&2; exit 1; }
  echo "$out" | awk '/^TIME/ {print $2}'
}
min() { awk -v a="$1" -v b="$2" 'BEGIN {print (b == "" || a < b) ? a : b}'; }
size() { # variant: its input's bytes
  case "$1" in
    protobuf) stat -c %s "$PB" ;;
    avro) stat -c %s "$AV" ;;
    container-*) stat -c %s "$DIR/quotes-$COUNT.${1#container-}.avro" ;;
  esac
}

echo "best of $RUNS alternating runs; $COUNT quotes; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| partitions | input | bytes | s | M msg/s | / protobuf |"
echo "|---|---|---:|---:|---:|---:|"
for parts in 1 2; do
  declare -A best=()
  for _ in $(seq "$RUNS"); do
    for v in $VARIANTS; do
      sql="$DIR/e2e-$v.sql"
      best[$v]=$(min "$(secs "$BIN" run --quiet --partitions $parts "$sql")" "${best[$v]:-}")
    done
  done
  for v in $VARIANTS; do
    awk -v p="$parts" -v v="$v" -v n="$(size "$v")" -v t="${best[$v]}" -v pb="${best[protobuf]}" -v c="$COUNT" 'BEGIN {
      printf "| %d | %s | %d | %.2f | %.2f | %.2fx |\n", p, v, n, t, c / t / 1e6, t / pb }'
  done
  unset best
done
