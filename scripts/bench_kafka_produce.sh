#!/usr/bin/env bash
# What sending costs weir's producer against librdkafka's (a benchmark, not a test). COUNT
# options quotes (default 2,000,000) go to 6-partition topics of a local broker
# (scripts/kafka.sh), each run a process measured by /usr/bin/time:
#   weir sink     `weir run`: the quotes from a protobuf file through a kafka sink, as JSON
#                 records keyed by ticker (decoding and encoding included), idempotent, acks=all
#   kcat keyed    librdkafka (Debian's kcat) sending the very records the sink wrote (read back
#                 from its topic as key<TAB>value lines), idempotent, acks=all, murmur2 keys as
#                 the sink places them
#   weir produce  `weir produce --framing lines`: the same JSON values, unkeyed
#   kcat values   kcat sending the same values, unkeyed
#   weir sink pb  `weir run`: the quotes from the file through a kafka sink as protobuf
#                 (`stocks.QuoteNBBO`, decoded and encoded again), unkeyed
#   kcat pb       kcat sending the very protobuf records that sink wrote (read back from its
#                 topic, split by an 8-byte delimiter no record contains: the count is checked)
# alternating, WEIR_BENCH_RUNS times each (default 3), each into a fresh topic. Prints Markdown:
# wall and CPU seconds, messages/s, CPU µs a message, and weir's CPU a message over kcat's.
# WEIR_BENCH_PIN=1 gives the broker a core of its own (the last one, by `taskset`) and runs the
# senders on the others, so that a sender's messages/s is not the broker's CPU taken from it.
#
#   scripts/bench_kafka_produce.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-2000000}"
RUNS="${WEIR_BENCH_RUNS:-3}"
command -v kcat >/dev/null || { echo "bench_kafka_produce.sh: kcat not found (apt-get install kcat)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench_kafka_produce.sh: python3 not found" >&2; exit 1; }
# shellcheck source=scripts/release_weir.sh
source scripts/release_weir.sh
# shellcheck source=scripts/bench_runs.sh
source scripts/bench_runs.sh
WORK="$(mktemp -d)"
export WEIR_KAFKA_RUN="$HOME/.cache/weir-kafka/run-produce-bench-$$"
trap 'scripts/kafka.sh stop >/dev/null 2>&1 || true; rm -rf "$WORK" "$WEIR_KAFKA_RUN"' EXIT
PIN_BROKER=() PIN_SENDER=()
if [ -n "${WEIR_BENCH_PIN:-}" ]; then
  last=$(( $(nproc) - 1 ))
  [ "$last" -ge 1 ] || { echo "bench_kafka_produce.sh: WEIR_BENCH_PIN needs two cores or more" >&2; exit 1; }
  PIN_BROKER=(taskset -c "$last") PIN_SENDER=(taskset -c "0-$(( last - 1 ))")
fi
BROKER="$("${PIN_BROKER[@]}" scripts/kafka.sh start)"
"$WEIR_BIN" gen quotes --count "$COUNT" --out "$WORK/q.pb" --schema-dir "$WORK/schema" >&2

new_topic() { "$WEIR_BIN" gen quotes --count 0 --to "kafka://$BROKER/$1" --topic-partitions 6 >/dev/null 2>&1; }
sink_sql() {
  cat <<SQL
CREATE SOURCE q (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT, bid_price DOUBLE,
                 ask_price DOUBLE, bid_size INT UNSIGNED, ask_size INT UNSIGNED)
  WITH ('connector' = 'file', 'path' = '$WORK/q.pb', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb');
CREATE SINK out FROM q WITH ('connector' = 'kafka', 'brokers' = '$BROKER', 'topic' = '$1',
  'encoding' = 'json', 'key' = 'ticker');
SQL
}
# The same quotes through a protobuf sink, unkeyed: the file's message, decoded and encoded.
sink_pb_sql() {
  cat <<SQL
CREATE SOURCE q WITH ('connector' = 'file', 'path' = '$WORK/q.pb', 'encoding' = 'protobuf',
                      'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb');
CREATE SINK out FROM q WITH ('connector' = 'kafka', 'brokers' = '$BROKER', 'topic' = '$1',
  'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb');
SQL
}
# The records the sink writes, as kcat reads them back: key<TAB>value lines, and the values.
new_topic first
sink_sql first > "$WORK/first.sql"
"$WEIR_BIN" run --quiet --partitions 1 "$WORK/first.sql" >/dev/null
kcat -C -b "$BROKER" -t first -e -q -f '%k\t%s\n' > "$WORK/keyed.txt"
cut -f2- "$WORK/keyed.txt" > "$WORK/values.txt"
[ "$(wc -l < "$WORK/keyed.txt")" -eq "$COUNT" ] || { echo "read back $(wc -l < "$WORK/keyed.txt") of $COUNT records" >&2; exit 1; }
# The protobuf records, as kcat reads them back: binary, so split by a delimiter they lack.
DELIM='\xde\xad\xbe\xef\xfe\xed\xfa\xce'
new_topic first-pb
sink_pb_sql first-pb > "$WORK/first-pb.sql"
"$WEIR_BIN" run --quiet --partitions 1 "$WORK/first-pb.sql" >/dev/null
kcat -C -b "$BROKER" -t first-pb -e -q -D "$DELIM" > "$WORK/pb.bin"
records=$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read().count(bytes.fromhex("deadbeeffeedface")))' "$WORK/pb.bin")
[ "$records" -eq "$COUNT" ] || { echo "read back $records of $COUNT protobuf records (a record holds the delimiter?)" >&2; exit 1; }
KCAT=(-b "$BROKER" -X enable.idempotence=true -X acks=all -X linger.ms=5
      -X batch.size=921600 -X partitioner=murmur2_random -X queue.buffering.max.messages=1000000)

declare -A res
for r in $(seq "$RUNS"); do
  for mode in weir-sink kcat-keyed weir-sink-pb kcat-pb weir-produce kcat-values; do
    topic="produce-$mode-$r"
    new_topic "$topic"
    case $mode in
      weir-sink) sink_sql "$topic" > "$WORK/run.sql"
        cmd=("$WEIR_BIN" run --quiet --partitions 1 "$WORK/run.sql") ;;
      kcat-keyed) cmd=(kcat -P "${KCAT[@]}" -t "$topic" -K $'\t' -l "$WORK/keyed.txt") ;;
      weir-sink-pb) sink_pb_sql "$topic" > "$WORK/run.sql"
        cmd=("$WEIR_BIN" run --quiet --partitions 1 "$WORK/run.sql") ;;
      kcat-pb) cmd=(kcat -P "${KCAT[@]}" -t "$topic" -D "$DELIM" -l "$WORK/pb.bin") ;;
      weir-produce) cmd=("$WEIR_BIN" produce --log-level warn --framing lines --input "$WORK/values.txt" --to "kafka://$BROKER/$topic") ;;
      kcat-values) cmd=(kcat -P "${KCAT[@]}" -t "$topic" -l "$WORK/values.txt") ;;
    esac
    "${PIN_SENDER[@]}" /usr/bin/time -o "$WORK/time" -f "%e %U %S" "${cmd[@]}" >/dev/null 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
    t=$(tail -1 "$WORK/time")
    res[$mode]="${res[$mode]:-} $t"
    echo "run $r $mode: $t" >&2
  done
done

echo "date: $(date -u +%Y-%m-%d)  nproc: $(nproc)  broker pinned: ${WEIR_BENCH_PIN:-no}  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')  messages: $COUNT  kcat: $(kcat -V 2>&1 | grep -o 'Version [0-9.]*\|librdkafka [0-9.]*' | tr '\n' ' ')"
echo
echo "| sender | runs (wall s / CPU s) | best messages/s | CPU µs a message (best) |"
echo "|---|---|---|---|"
for mode in weir-sink kcat-keyed weir-sink-pb kcat-pb weir-produce kcat-values; do
  runs_row "$mode"
done
echo
# shellcheck disable=SC2154
echo "CPU a message, weir sink / kcat keyed: $(awk -v a="$cpu_weir_sink" -v b="$cpu_kcat_keyed" 'BEGIN { printf "%.2f", a / b }')x; weir sink pb / kcat pb: $(awk -v a="$cpu_weir_sink_pb" -v b="$cpu_kcat_pb" 'BEGIN { printf "%.2f", a / b }')x; weir produce / kcat values: $(awk -v a="$cpu_weir_produce" -v b="$cpu_kcat_values" 'BEGIN { printf "%.2f", a / b }')x"
