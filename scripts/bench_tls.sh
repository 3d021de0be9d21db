#!/usr/bin/env bash
# TLS 1.3 records read in place (weir-kafka's tls13.rs) against rustls's own buffered stream with
# the same 256 KiB socket buffer and 100 µs read linger (WEIR_KAFKA_TLS_STREAM=rustls), over the
# SASL_SSL listener of one local broker (scripts/kafka.sh start --secure): COUNT options quotes
# (default 10,000,000) in 4 partitions, read to the end by the bench crate's `kafka read`, as a
# raw read (CRC checked) and as read + decode into Arrow. The two readers alternate ROUNDS times
# (default 10) in one run. Prints each run's CPU seconds (user + system) per 1M messages, the
# medians, and the in-place reader's CPU against rustls's stream (a benchmark, not a test).
#
#   scripts/bench_tls.sh [COUNT] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-10000000}"
ROUNDS="${2:-10}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-bench-target}"
(cd bench && cargo build --release --locked --bin kafka >&2)
BIN="$CARGO_TARGET_DIR/release/kafka"

export WEIR_KAFKA_RUN="$HOME/.cache/weir-kafka/run-bench-tls-$$"
OUT="$(mktemp -d)"
trap 'scripts/kafka.sh stop || true; rm -rf "$WEIR_KAFKA_RUN" "$OUT"' EXIT
BROKER="$(scripts/kafka.sh start --secure)"
eval "$(scripts/kafka.sh env)"
"$BIN" load "$BROKER" quotes 4 "$COUNT" >&2
cat > "$OUT/sasl_ssl.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.username=$WEIR_KAFKA_SASL_USER
sasl.password=$WEIR_KAFKA_SASL_PASSWORD
ssl.ca.location=$WEIR_KAFKA_CA
PROPS
read_once() { # $1: in-place | rustls, $2: raw | decode; prints CPU s per 1M messages
    local stream=""
    [ "$1" = rustls ] && stream=rustls
    WEIR_KAFKA_TLS_STREAM="$stream" /usr/bin/time -f "%e %U %S" -o "$OUT/time" \
        "$BIN" read "$WEIR_KAFKA_SASL_SSL" quotes "$2" crc --config "$OUT/sasl_ssl.properties" \
        >"$OUT/stdout" 2>"$OUT/stderr" || { echo "bench_tls.sh: $1 $2 failed:" >&2; tail -5 "$OUT/stderr" >&2; exit 1; }
    grep -q " $COUNT messages" "$OUT/stdout" || { echo "bench_tls.sh: $1 $2 read: $(cat "$OUT/stdout")" >&2; exit 1; }
    read -r wall user sys < "$OUT/time"
    awk -v u="$user" -v s="$sys" -v n="$COUNT" -v w="$wall" 'BEGIN { printf "%.4f %.2f", (u + s) / (n / 1e6), w }'
}
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "$COUNT quotes, 4 partitions, SASL_SSL (TLS 1.3, SASL PLAIN), $ROUNDS rounds alternating"
read_once in-place raw >/dev/null # warm the page cache and the broker
printf "%-6s %-7s %-9s %s\n" round read reader "cpu_s_per_1M wall_s"
for r in $(seq 1 "$ROUNDS"); do
    for kind in raw decode; do
        for stream in in-place rustls; do
            got="$(read_once "$stream" "$kind")"
            printf "%-6s %-7s %-9s %s\n" "$r" "$kind" "$stream" "$got"
            echo "$kind $stream $got" >> "$OUT/results"
        done
    done
done
python3 - "$OUT/results" <<'PY'
import statistics, sys
res = {}
for line in open(sys.argv[1]):
    kind, stream, cpu, wall = line.split()
    res.setdefault((kind, stream), []).append(float(cpu))
for kind in ("raw", "decode"):
    a, b = res[(kind, "in-place")], res[(kind, "rustls")]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{kind}: CPU s per 1M messages, median: in place {ma:.4f}, rustls's stream {mb:.4f}; "
          f"in place saves {100 * (1 - ma / mb):.1f}% (least: {min(a):.4f} against {min(b):.4f})")
PY
