#!/usr/bin/env bash
# The Kafka read benchmark (a benchmark, not a test): COUNT options quotes (default 10,000,000)
# in a 4-partition topic on a local broker (scripts/kafka.sh), read to the end by
#   weir      raw read (CRC checked, and not), and read + decode into Arrow (12 columns)
#   kcat      librdkafka's consumer (Debian's kcat, printing only each offset)
#   Java      Kafka's own consumer (org.apache.kafka.tools.ConsumerPerformance)
# and then weir and kcat again over SASL_SSL (TLS 1.3, SASL PLAIN as Confluent Cloud uses it; kcat's
# librdkafka 2.0.2 fails SCRAM against this broker) on the same broker, with the ratio of weir's CPU
# per message over TLS to its plaintext figure (target: at most 1.3x).
# Each consumer is a separate process measured by /usr/bin/time: wall seconds, user and system
# CPU seconds, from which messages/s and CPU seconds per million messages. Prints Markdown.
#
#   scripts/bench_kafka.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
COUNT="${1:-10000000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-bench-target}"

command -v kcat >/dev/null || { echo "bench_kafka.sh: kcat not found (apt-get install kcat)" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "bench_kafka.sh: /usr/bin/time not found" >&2; exit 1; }

(cd bench && cargo build --release --locked --bin kafka >&2)
BIN="$CARGO_TARGET_DIR/release/kafka"

export WEIR_KAFKA_RUN="$HOME/.cache/weir-kafka/run-bench-$$"
trap 'scripts/kafka.sh stop || true; rm -rf "$WEIR_KAFKA_RUN"' EXIT
# One JVM with the plaintext listener (first line) and the secure ones (`kafka.sh env`).
BROKER="$(scripts/kafka.sh start --secure)"
eval "$(scripts/kafka.sh env)"
CP="$(scripts/kafka.sh classpath)"
TOPIC=quotes

"$BIN" load "$BROKER" "$TOPIC" 4 "$COUNT" >&2

OUT="$(mktemp -d)"
# The security settings as a Java properties file, as `weir --kafka-config FILE` takes them.
cat > "$OUT/sasl_ssl.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.username=$WEIR_KAFKA_SASL_USER
sasl.password=$WEIR_KAFKA_SASL_PASSWORD
ssl.ca.location=$WEIR_KAFKA_CA
PROPS
SASL_SSL=(--config "$OUT/sasl_ssl.properties")
KCAT_SASL_SSL=(-X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN
    -X "sasl.username=$WEIR_KAFKA_SASL_USER" -X "sasl.password=$WEIR_KAFKA_SASL_PASSWORD"
    -X "ssl.ca.location=$WEIR_KAFKA_CA")
# Runs a consumer under /usr/bin/time; prints a table row.
measure() {
    local name="$1"; shift
    /usr/bin/time -f "%e %U %S" -o "$OUT/time" "$@" >"$OUT/stdout" 2>"$OUT/stderr" || {
        echo "bench_kafka.sh: $name failed:" >&2; tail -20 "$OUT/stderr" >&2; exit 1; }
    read -r wall user sys < "$OUT/time"
    # Every contender must have read every message (and weir's decode produced every row).
    case "$name" in
        weir*) grep -q " $COUNT messages" "$OUT/stdout" || { echo "$name: wrong count: $(cat "$OUT/stdout")" >&2; exit 1; }
               case "$name" in *decode*) grep -q " $COUNT rows" "$OUT/stdout" || { echo "$name: wrong rows" >&2; exit 1; } ;; esac
               cat "$OUT/stdout" >> "$OUT/notes" ;;
        kcat*) [[ "$(wc -l < "$OUT/stdout")" == "$COUNT" ]] || { echo "$name: read $(wc -l < "$OUT/stdout") messages" >&2; exit 1; } ;;
        Java*) grep -q ", $COUNT," "$OUT/stdout" || { echo "$name: wrong count: $(cat "$OUT/stdout")" >&2; exit 1; }
               tail -1 "$OUT/stdout" | sed 's/^/Java: /' >> "$OUT/notes" ;;
    esac
    python3 - "$name" "$COUNT" "$wall" "$user" "$sys" "$OUT/cpu" <<'PY'
import sys
name, n, wall, user, sys_ = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:6])
cpu = user + sys_
print(f"| {name} | {wall:.2f} | {n / wall:,.0f} | {user:.2f} | {sys_:.2f} | {cpu / (n / 1e6):.3f} |")
with open(sys.argv[6], "a") as f:
    f.write(f"{name}\t{cpu / (n / 1e6)}\n")
PY
}

# CPU per 1M messages of a row measured above.
cpu_of() { awk -F'\t' -v n="$1" '$1 == n { print $2 }' "$OUT/cpu"; }

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "$COUNT quotes, 4 partitions, Kafka 4.3.1 on 127.0.0.1 (same machine); one warm-up read first"
echo
# Warm the page cache so every contender reads from memory.
"$BIN" read "$BROKER" "$TOPIC" raw nocrc >&2
echo "| consumer | wall s | msg/s (process wall) | user s | sys s | CPU s per 1M msgs |"
echo "|---|---|---|---|---|---|"
measure "weir raw read (CRC checked)" "$BIN" read "$BROKER" "$TOPIC" raw crc
measure "weir raw read (no CRC, as kcat)" "$BIN" read "$BROKER" "$TOPIC" raw nocrc
measure "weir read + decode to Arrow" "$BIN" read "$BROKER" "$TOPIC" decode crc
measure "kcat 1.7.1 / librdkafka 2.0.2" kcat -C -b "$BROKER" -t "$TOPIC" -o beginning -e -q -f '%o\n'
measure "Java ConsumerPerformance 4.3.1" java -Xmx512m -cp "$CP" org.apache.kafka.tools.ConsumerPerformance \
    --bootstrap-server "$BROKER" --topic "$TOPIC" --messages "$COUNT" --timeout 60000
measure "weir raw read, SASL_SSL (CRC checked)" "$BIN" read "$WEIR_KAFKA_SASL_SSL" "$TOPIC" raw crc "${SASL_SSL[@]}"
measure "weir raw read, SASL_SSL (no CRC)" "$BIN" read "$WEIR_KAFKA_SASL_SSL" "$TOPIC" raw nocrc "${SASL_SSL[@]}"
measure "weir read + decode, SASL_SSL" "$BIN" read "$WEIR_KAFKA_SASL_SSL" "$TOPIC" decode crc "${SASL_SSL[@]}"
measure "kcat, SASL_SSL" kcat -C -b "$WEIR_KAFKA_SASL_SSL" "${KCAT_SASL_SSL[@]}" -t "$TOPIC" -o beginning -e -q -f '%o\n'
echo
python3 - "$(cpu_of "weir raw read (CRC checked)")" "$(cpu_of "weir raw read, SASL_SSL (CRC checked)")" \
    "$(cpu_of "weir raw read (no CRC, as kcat)")" "$(cpu_of "weir raw read, SASL_SSL (no CRC)")" \
    "$(cpu_of "weir read + decode to Arrow")" "$(cpu_of "weir read + decode, SASL_SSL")" \
    "$(cpu_of "kcat 1.7.1 / librdkafka 2.0.2")" "$(cpu_of "kcat, SASL_SSL")" <<'PY'
import sys
v = list(map(float, sys.argv[1:]))
for label, plain, tls in [("raw read, CRC checked", v[0], v[1]), ("raw read, no CRC", v[2], v[3]),
                          ("read + decode", v[4], v[5]), ("kcat", v[6], v[7])]:
    print(f"SASL_SSL / plaintext CPU per message, {label}: {tls / plain:.2f}x")
print(f"weir raw read over SASL_SSL against kcat over SASL_SSL (no CRC): {v[3] / v[7]:.2f}x")
PY
echo
echo "Counts checked: every contender read $COUNT messages. In-process figures (after connect):"
echo
sed 's/^/    /' "$OUT/notes"
rm -rf "$OUT"
