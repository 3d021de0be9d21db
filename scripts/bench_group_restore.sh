#!/usr/bin/env bash
# Consumer groups: how long a member takes to restore a partition's dedup keys when it takes the
# partition up. Against the broker of scripts/kafka.sh (started here unless WEIR_KAFKA_BOOTSTRAP
# is set): N distinct quotes (default 1,000,000) in a one-partition topic, read by a member with
# 'dedup.key' = 'ticker, sequence_number' into a local Delta table, its keys under a local
# 'state.dir'. Once it holds N keys it is stopped (SIGTERM); a second member takes the partition
# up, restoring from the first one's step files (and writing them back as one file); it is
# stopped and a third restores from that one file. Each restore's figures are its member's log
# line ("restored the partition's dedup keys": keys, files, bytes, ms).
#
#   scripts/bench_group_restore.sh [N]
#
# With WEIR_BENCH_S3=1 the keys are on the S3-compatible store at WEIR_S3_ENDPOINT
# (scripts/objectstore.sh start prints its variables; WEIR_S3_BUCKET must exist) instead.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-1000000}"
source scripts/release_weir.sh
WEIR="$WEIR_BIN"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if [ -n "${OWN_BROKER:-}" ]; then WEIR_KAFKA_RUN="$WORK/kafka" scripts/kafka.sh stop >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -z "${WEIR_KAFKA_BOOTSTRAP:-}" ]; then
  OWN_BROKER=1
  WEIR_KAFKA_BOOTSTRAP="$(WEIR_KAFKA_RUN="$WORK/kafka" scripts/kafka.sh start | tail -1)"
fi
B="$WEIR_KAFKA_BOOTSTRAP"
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
TOPIC="restore-$$-$(date +%s)"
"$WEIR" gen quotes --count 1 --out /dev/null --schema-dir "$WORK/schema" 2>/dev/null
"$WEIR" gen quotes --count "$N" --seed 7 --to "kafka://$B/$TOPIC" --topic-partitions 1 >/dev/null 2>&1
STATE="'state.dir' = '$WORK/keys'"
if [ "${WEIR_BENCH_S3:-}" = 1 ]; then
  STATE="'state.dir' = 's3://$WEIR_S3_BUCKET/$TOPIC/keys', 's3.endpoint' = '$WEIR_S3_ENDPOINT', 's3.region' = 'us-east-1', 's3.access.key.id' = '$WEIR_S3_ACCESS_KEY', 's3.secret.access.key' = '\${env:WEIR_S3_SECRET_KEY}'"
fi
echo "keys in: ${STATE%%,*}"
cat > "$WORK/p.sql" <<SQL
CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE)
  WITH ('connector' = 'kafka', 'brokers' = '$B', 'topic' = '$TOPIC', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb',
        'group.id' = '$TOPIC', 'session.timeout.ms' = '6000', 'commit.interval' = '200ms',
        $STATE, 'dedup.key' = 'ticker, sequence_number');
CREATE SINK t FROM q WITH ('connector' = 'delta', 'path' = '$WORK/table', 'app.id' = 'bench');
SQL

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
keys_held() { # the member's weir_source_group_state_keys, at metrics port $1
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^weir_source_group_state_keys/ {print $2}' | head -1
}

# Runs a member until it holds N keys, then stops it; prints its restore line.
member() { # $1: name
  local p; p=$(port)
  "$WEIR" run --follow --log-level info --metrics-addr "127.0.0.1:$p" "$WORK/p.sql" 2> "$WORK/$1.log" &
  local pid=$!
  PIDS+=("$pid")
  local deadline=$((SECONDS + 300))
  until [ "$(keys_held "$p")" = "$N" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "member $1 exited:"; tail -20 "$WORK/$1.log"; exit 1; fi
    if [ "$SECONDS" -gt "$deadline" ]; then echo "member $1 never held $N keys"; tail -20 "$WORK/$1.log"; exit 1; fi
    sleep 0.2
  done
  kill -TERM "$pid"
  wait "$pid" || true
  local line; line=$(grep "restored the partition's dedup keys" "$WORK/$1.log" | tail -1 || true)
  if [ -n "$line" ]; then
    python3 - "$line" "$1" <<'PY'
import re, sys
f = dict(re.findall(r'(\w+)=(\S+)', sys.argv[1]))
print(f"| {sys.argv[2]} | {int(f['keys']):,} | {f['files']} | {int(f['bytes']):,} | {f['ms']} ms |")
PY
  fi
}

echo
echo "| member | keys restored | files read | bytes read | restore time |"
echo "|---|---|---|---|---|"
member first
member second
member third
