#!/usr/bin/env bash
# Continuous SQL speed (a benchmark, not a test), two parts:
#
# 1. File source, COUNT quotes (default 20,000,000; and COUNT/10 for peak memory), 10,000 quotes
#    a second of event time (so the input spans many minutes): one-minute tumbling windows by
#    ticker with count, min, max, first and last, next to the same aggregation written as a
#    bounded GROUP BY date_bin(...) over the plain source, in the same run. Each variant runs in
#    its own process under /usr/bin/time (best of WEIR_BENCH_RUNS, default 3; the largest peak
#    RSS). Target: windows at least 0.8x the date_bin throughput, and a peak RSS that does not
#    grow with the input.
# 2. The local broker (scripts/kafka.sh) with --follow into Parquet: KAFKA_COUNT quotes (default
#    20,000,000) loaded into a 4-partition topic, then `weir run --follow` with the windowed
#    query into a parquet sink for WEIR_BENCH_SECONDS (default 4) before Ctrl-C; messages read
#    per second from the run summary. Target: at least 2 M msg/s on this 2-core machine with the
#    broker on it.
#
#   scripts/bench_windows.sh [COUNT]   (WEIR_BENCH_DIR: where data goes, default /tmp/weir-windows)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-20000000}"
KAFKA_COUNT="${KAFKA_COUNT:-20000000}"
DIR="${WEIR_BENCH_DIR:-/tmp/weir-windows}"
RUNS="${WEIR_BENCH_RUNS:-3}"
SECONDS_FOLLOW="${WEIR_BENCH_SECONDS:-4}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-release-target}"
cargo build --release --locked -p weir --bin weir >&2
WEIR="$CARGO_TARGET_DIR/release/weir"
mkdir -p "$DIR"
[ -s "$DIR/schema/stocks.pb" ] || "$WEIR" gen quotes --count 1 --out "$DIR/one.bin" --schema-dir "$DIR/schema" 2>/dev/null

echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo
echo "| input | query | seconds | M quotes/s | peak RSS (MiB) |"
echo "|---|---|---|---|---|"
row() { # label count sql
  local label=$1 n=$2 sql=$3 out secs="" kb=0 s k
  for _ in $(seq "$RUNS"); do
    out=$( { /usr/bin/time -f "TIME %e %M" "$WEIR" run --quiet --output "$DIR/out.parquet" "$sql" >/dev/null; } 2>&1 ) \
      || { echo "$out" >&2; exit 1; }
    read -r s k < <(echo "$out" | awk '/^TIME/ {print $2, $3}')
    if [ -z "$secs" ] || awk -v a="$s" -v b="$secs" 'BEGIN {exit !(a < b)}'; then secs=$s; fi
    [ "$k" -gt "$kb" ] && kb=$k
  done
  awk -v l="$label" -v n="$n" -v s="$secs" -v kb="$kb" 'BEGIN {
    printf "| %s quotes | %s | %.2f | %.2f | %.0f |\n", n, l, s, n / s / 1e6, kb / 1024 }'
  echo "$secs" > "$DIR/last-secs"
}
for n in "$COUNT" $((COUNT / 10)); do
  data="$DIR/quotes-$n.bin"
  if [ ! -s "$data" ]; then
    "$WEIR" gen quotes --count "$n" --per-second 10000 --out "$data.tmp" 2>/dev/null
    mv "$data.tmp" "$data"
  fi
  src="CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE,
      WATERMARK FOR timestamp AS timestamp - INTERVAL '5 seconds')
    WITH ('connector' = 'file', 'path' = '$data', 'encoding' = 'protobuf',
          'message' = 'stocks.QuoteNBBO', 'location' = '$DIR/schema/stocks.pb');"
  cat > "$DIR/windows.sql" <<SQL
$src
SELECT window_start, ticker, count(*), min(bid_price), max(ask_price),
       first_value(bid_price ORDER BY timestamp), last_value(bid_price ORDER BY timestamp)
FROM TUMBLE(q, timestamp, INTERVAL '1 minute') GROUP BY window_start, window_end, ticker;
SQL
  cat > "$DIR/date_bin.sql" <<SQL
$src
SELECT date_bin(INTERVAL '1 minute', timestamp, TIMESTAMP '1970-01-01') AS w, ticker, count(*),
       min(bid_price), max(ask_price), first_value(bid_price ORDER BY timestamp),
       last_value(bid_price ORDER BY timestamp)
FROM q GROUP BY w, ticker;
SQL
  row "TUMBLE windows" "$n" "$DIR/windows.sql"; w=$(cat "$DIR/last-secs")
  row "GROUP BY date_bin (bounded)" "$n" "$DIR/date_bin.sql"; d=$(cat "$DIR/last-secs")
  awk -v w="$w" -v d="$d" -v n="$n" 'BEGIN { printf "\n%s quotes: windows reach %.2fx the date_bin throughput (target 0.8x)\n\n", n, d / w }'
done

command -v java >/dev/null || { echo "no Java: the Kafka part is skipped" >&2; exit 0; }
export WEIR_KAFKA_RUN="$HOME/.cache/weir-kafka/run-bench-windows-$$"
trap 'scripts/kafka.sh stop >/dev/null 2>&1 || true; rm -rf "$WEIR_KAFKA_RUN"' EXIT
BROKER="$(scripts/kafka.sh start)"
TOPIC="bench-windows-$$"
"$WEIR" gen quotes --count "$KAFKA_COUNT" --per-second 10000 --to "kafka://$BROKER/$TOPIC" --topic-partitions 4 >&2
cat > "$DIR/follow.sql" <<SQL
CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, ask_price DOUBLE,
    WATERMARK FOR timestamp AS timestamp - INTERVAL '5 seconds')
  WITH ('connector' = 'kafka', 'brokers' = '$BROKER', 'topic' = '$TOPIC', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$DIR/schema/stocks.pb');
CREATE SINK bars FROM (
  SELECT window_start, window_end, ticker, count(*) AS n, min(bid_price) AS lo, max(ask_price) AS hi,
         first_value(bid_price ORDER BY timestamp) AS first_bid, last_value(bid_price ORDER BY timestamp) AS last_bid
  FROM TUMBLE(q, timestamp, INTERVAL '1 minute') GROUP BY window_start, window_end, ticker
) WITH ('connector' = 'parquet', 'path' = '$DIR/follow-bars.parquet');
SQL
echo "| Kafka, --follow into Parquet | seconds | messages | M msg/s |"
echo "|---|---|---|---|"
for _ in $(seq "$RUNS"); do
  "$WEIR" run --follow "$DIR/follow.sql" 2>"$DIR/follow.log" &
  pid=$!
  sleep "$SECONDS_FOLLOW"
  kill -INT "$pid"
  wait "$pid" || true
  line=$(grep -m1 "^source q:" "$DIR/follow.log")
  echo "$line" | awk '{ gsub(",", "", $3); for (i = 1; i <= NF; i++) if ($i == "in") s = $(i + 1);
    printf "| 4 partitions, 2 readers | %.2f | %s | %.2f |\n", s, $3, $3 / s / 1e6 }'
done
