#!/usr/bin/env bash
# What metrics cost: the same pipelines run by the same weir program without and with
# `--metrics-addr` (and a scrape of /metrics every second, as Prometheus would), alternating
# runs through scripts/bench_ab.sh. Two pipelines on N quotes (5,000,000 by default) from the
# file source: bench_e2e.sh's GROUP BY ticker query, and a dedup pipeline into an exactly-once
# Parquet sink (10% repeats), which also publishes the state statistics at each commit.
#
#   scripts/bench_metrics.sh [COUNT] [RUNS]   (WEIR_BENCH_DIR: where the data goes, default
#                                              /tmp/weir-bench-metrics; WEIR_BIN: a weir
#                                              program to use instead of building one)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-5000000}" RUNS="${2:-5}"
DIR="${WEIR_BENCH_DIR:-/tmp/weir-bench-metrics}"
# shellcheck source=scripts/release_weir.sh
source scripts/release_weir.sh
mkdir -p "$DIR"
DATA="$DIR/quotes-$COUNT.bin"
if [ ! -s "$DATA" ]; then
  "$WEIR_BIN" gen quotes --count "$COUNT" --duplicates 0.1 --out "$DATA.tmp" --schema-dir "$DIR" >&2
  mv "$DATA.tmp" "$DATA"
fi
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The "with metrics" program: weir with --metrics-addr, scraped every second while it runs.
cat > "$DIR/weir-with-metrics" <<SH
#!/usr/bin/env bash
( while sleep 1; do curl -s http://127.0.0.1:$PORT/metrics >/dev/null || true; done ) &
scraper=\$!
trap 'kill \$scraper 2>/dev/null || true' EXIT
"$WEIR_BIN" "\$1" --metrics-addr 127.0.0.1:$PORT "\${@:2}"
SH
chmod +x "$DIR/weir-with-metrics"
cat > "$DIR/groupby.sql" <<SQL
CREATE SOURCE opra_quotes (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE, ...)
WITH ('connector' = 'file', 'path' = '$DATA', 'encoding' = 'protobuf',
      'message' = 'stocks.QuoteNBBO', 'location' = '$DIR/stocks.pb');
SELECT ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) FROM opra_quotes GROUP BY ticker;
SQL
cat > "$DIR/dedup.sql" <<SQL
CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT, bid_price DOUBLE, ask_price DOUBLE)
WITH ('connector' = 'file', 'path' = '$DATA', 'encoding' = 'protobuf',
      'message' = 'stocks.QuoteNBBO', 'location' = '$DIR/stocks.pb',
      'state.dir' = '$DIR/state', 'dedup.key' = 'ticker,sequence_number');
CREATE SINK out FROM q WITH ('connector' = 'parquet', 'path' = '$DIR/out');
SQL
echo "$COUNT quotes, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); A: no metrics, B: --metrics-addr with a scrape every second"
echo
echo "GROUP BY ticker:"
scripts/bench_ab.sh "$WEIR_BIN" "$DIR/weir-with-metrics" "$DIR/groupby.sql" "$RUNS"
echo
echo "dedup into an exactly-once Parquet sink:"
WEIR_AB_BEFORE="rm -rf '$DIR/state' '$DIR/out'" scripts/bench_ab.sh "$WEIR_BIN" "$DIR/weir-with-metrics" "$DIR/dedup.sql" "$RUNS"
