#!/usr/bin/env bash
# What exactly once costs the kafka sink (a benchmark, not a test): COUNT options quotes
# (default 2,000,000) from a protobuf file into a 6-partition topic of a local broker
# (scripts/kafka.sh), as JSON records keyed by ticker, written by
#   idempotent    a file source without state: acks=all, an idempotent producer, at least once
#   exactly once  the same source with 'state.dir' and 'commit.interval' = '1s': one Kafka
#                 transaction a step, committed after the step's state commit
# both with one reader (a source with state has one), alternating, WEIR_BENCH_RUNS times each
# (default 3), each into a fresh topic. WEIR_BENCH_COMMIT sets the exactly-once step's
# 'commit.interval' (default 1s; shorter steps weigh the transaction's round trips more). Each run is a process measured by /usr/bin/time. Prints
# Markdown: wall and CPU seconds, messages/s, and exactly once's throughput over idempotent's.
#
#   scripts/bench_kafka_sink.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-2000000}"
RUNS="${WEIR_BENCH_RUNS:-3}"
COMMIT="${WEIR_BENCH_COMMIT:-1s}"
# shellcheck source=scripts/release_weir.sh
source scripts/release_weir.sh
# shellcheck source=scripts/bench_runs.sh
source scripts/bench_runs.sh
WORK="$(mktemp -d)"
export WEIR_KAFKA_RUN="$HOME/.cache/weir-kafka/run-sink-bench-$$"
trap 'scripts/kafka.sh stop >/dev/null 2>&1 || true; rm -rf "$WORK" "$WEIR_KAFKA_RUN"' EXIT
BROKER="$(scripts/kafka.sh start)"
"$WEIR_BIN" gen quotes --count "$COUNT" --out "$WORK/q.pb" --schema-dir "$WORK/schema" >&2

declare -A res
for r in $(seq "$RUNS"); do
  for mode in idempotent exactly-once; do
    topic="sink-bench-$mode-$r"
    "$WEIR_BIN" gen quotes --count 0 --to "kafka://$BROKER/$topic" --topic-partitions 6 >/dev/null 2>&1
    state=""
    [ "$mode" = exactly-once ] && state=", 'state.dir' = '$WORK/state-$r', 'commit.interval' = '$COMMIT'"
    cat > "$WORK/$mode.sql" <<SQL
CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT, bid_price DOUBLE,
                 ask_price DOUBLE, bid_size INT UNSIGNED, ask_size INT UNSIGNED)
  WITH ('connector' = 'file', 'path' = '$WORK/q.pb', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb'$state);
CREATE SINK out FROM q WITH ('connector' = 'kafka', 'brokers' = '$BROKER', 'topic' = '$topic',
  'encoding' = 'json', 'key' = 'ticker');
SQL
    /usr/bin/time -o "$WORK/time" -f "%e %U %S" "$WEIR_BIN" run --quiet --partitions 1 \
      "$WORK/$mode.sql" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
    t=$(tail -1 "$WORK/time")
    res[$mode]="${res[$mode]:-} $t"
    echo "run $r $mode: $t" >&2
  done
done

echo "date: $(date -u +%Y-%m-%d)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')  messages: $COUNT  commit.interval: $COMMIT"
echo
echo "| mode | runs (wall s / CPU s) | best messages/s | CPU µs a message (best) |"
echo "|---|---|---|---|"
for mode in idempotent exactly-once; do
  runs_row "$mode"
done
echo
# shellcheck disable=SC2154
echo "exactly once / idempotent throughput (best runs): $(awk -v a="$best_idempotent" -v b="$best_exactly_once" 'BEGIN { printf "%.3f", a / b }')"
