#!/usr/bin/env bash
# Consumer groups: how long partitions go unread when a member dies, and what a second member
# adds to throughput. Against the broker of scripts/kafka.sh (started here unless
# WEIR_KAFKA_BOOTSTRAP is set), a 12-partition topic, Kafka sources with 'group.id' writing one
# local Delta table.
#
#   scripts/bench_group.sh [KILLS] [N]
#
# WEIR_BENCH_PARTS picks the parts (default "takeover throughput"). WEIR_BENCH_SINK=kafka makes
# the takeover's members write a Kafka topic in transactions that commit the group's offsets
# instead of a Delta table (default delta).
# 1. Takeover, for each group protocol: two members read while a producer writes; one is
#    killed with kill -9 (KILLS times, default 5, started again after each) or stopped with
#    SIGTERM (as many times). The time from the signal to the log line in which the other
#    member takes up the whole topic, against the session timeout (6 s: the test broker's
#    group.consumer.session.timeout.ms, and 'session.timeout.ms' for the classic protocol).
# 2. Throughput: N quotes (default 2,000,000) already in the topic, read into a fresh table by
#    one member pinned to one core (taskset -c 0), then by two pinned to a core each; the time
#    until the table's positions reach the end of every partition. The broker runs unpinned on
#    the same machine, so on 2 cores it takes time from both members: the ratio is a lower
#    bound of what members on their own machines get.
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS="${1:-5}"
N="${2:-2000000}"
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
"$WEIR" gen quotes --count 1 --out /dev/null --schema-dir "$WORK/schema" 2>/dev/null
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

SINK="${WEIR_BENCH_SINK:-delta}"
sql() { # $1: topic, $2: protocol, $3: table
  local sink="'connector' = 'delta', 'path' = '$3', 'app.id' = 'bench'"
  if [ "$SINK" = kafka ]; then
    sink="'connector' = 'kafka', 'brokers' = '$B', 'topic' = '$1-out', 'encoding' = 'json', 'transactional.id' = 'bench'"
  fi
  cat <<SQL
CREATE SOURCE q (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE)
  WITH ('connector' = 'kafka', 'brokers' = '$B', 'topic' = '$1', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb',
        'group.id' = '$1', 'group.protocol' = '$2', 'session.timeout.ms' = '6000',
        'commit.interval' = '500ms');
CREATE SINK t FROM q WITH ($sink);
SQL
}

# The epoch milliseconds of the first line of $1, after line $2, in which the member takes up
# all 12 partitions.
took_all() {
  python3 - "$1" "$2" <<'PY'
import sys, datetime
lines = open(sys.argv[1]).read().splitlines()[int(sys.argv[2]):]
for l in lines:
    if "reading these partitions" in l and "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11" in l:
        t = datetime.datetime.strptime(l[:23], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
        print(int(t.timestamp() * 1000)); break
PY
}

holds_some() { # whether log $1 says, after line $2, that the member reads a non-empty set
  tail -n +"$(($2 + 1))" "$1" | grep "reading these partitions" | tail -1 | grep -q 'partitions="\['
}

PARTS="${WEIR_BENCH_PARTS:-takeover throughput}"
if [[ " $PARTS " == *" takeover "* ]]; then
echo
echo "takeover into $SINK: from the signal to the other member reading all 12 partitions (session timeout 6 s)"
printf '%-9s %-8s %8s %8s %8s\n' protocol signal min median max
for protocol in consumer classic; do
  topic="bench-group-$protocol-$$"
  "$WEIR" gen quotes --count 1000 --to "kafka://$B/$topic" --topic-partitions 12 >/dev/null 2>&1
  [ "$SINK" = kafka ] && "$WEIR" gen quotes --count 0 --to "kafka://$B/$topic-out" --topic-partitions 6 >/dev/null 2>&1
  sql "$topic" "$protocol" "$WORK/t-$protocol" > "$WORK/$protocol.sql"
  ( i=0; while [ -f "$WORK/$protocol.sql" ]; do i=$((i + 1));
      "$WEIR" gen quotes --count 500 --seed "$i" --to "kafka://$B/$topic" >/dev/null 2>&1; sleep 0.2; done ) &
  PIDS+=($!)
  "$WEIR" run --follow "$WORK/$protocol.sql" 2> "$WORK/stay-$protocol.log" &
  PIDS+=($!)
  for sig in KILL TERM; do
    times=()
    for k in $(seq 1 "$KILLS"); do
      "$WEIR" run --follow "$WORK/$protocol.sql" 2> "$WORK/go-$protocol-$sig-$k.log" &
      go=$!
      PIDS+=($go)
      # Both members hold partitions, and the group has settled.
      for _ in $(seq 1 600); do
        if holds_some "$WORK/go-$protocol-$sig-$k.log" 0 && holds_some "$WORK/stay-$protocol.log" 0 \
            && ! tail -1 "$WORK/stay-$protocol.log" | grep -q "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11"; then
          break
        fi
        sleep 0.1
      done
      sleep 3
      mark=$(wc -l < "$WORK/stay-$protocol.log")
      t0=$(date +%s%3N)
      kill -"$sig" "$go"
      wait "$go" 2>/dev/null || true
      t1=""
      for _ in $(seq 1 300); do
        t1=$(took_all "$WORK/stay-$protocol.log" "$mark")
        [ -n "$t1" ] && break
        sleep 0.1
      done
      [ -n "$t1" ] || { echo "no takeover after $sig in 30 s; logs in $WORK" >&2; tail -5 "$WORK/stay-$protocol.log" >&2; exit 1; }
      times+=($((t1 - t0)))
    done
    python3 - "$protocol" "$sig" "${times[@]}" <<'PY'
import sys, statistics
p, s, *t = sys.argv[1:]
t = sorted(int(x) / 1000 for x in t)
print(f"{p:<9} {('kill -9' if s == 'KILL' else 'SIGTERM'):<8} {t[0]:7.2f}s {statistics.median(t):7.2f}s {t[-1]:7.2f}s")
PY
  done
  rm -f "$WORK/$protocol.sql"
  for p in "${PIDS[@]}"; do { kill -9 "$p"; wait "$p"; } 2>/dev/null || true; done
  PIDS=()
done

fi

[[ " $PARTS " == *" throughput "* ]] || exit 0
echo
echo "throughput: $N quotes from 12 partitions into a fresh table, members pinned a core each"
topic="bench-group-load-$$"
"$WEIR" gen quotes --count "$N" --to "kafka://$B/$topic" --topic-partitions 12 >/dev/null 2>&1
# The end offset of each partition, from the broker (what a complete table's positions reach).
"$WEIR" run /dev/stdin > "$WORK/ends.csv" 2>/dev/null <<SQL
CREATE SOURCE e (v BYTEA) INCLUDE partition AS p INCLUDE offset AS o
  WITH ('connector' = 'kafka', 'brokers' = '$B', 'topic' = '$topic', 'encoding' = 'raw');
SELECT p, max(o) + 1 AS end_offset FROM e GROUP BY p ORDER BY p;
SQL
done_when() { # seconds until the table at $1 holds every partition's end offset
  python3 - "$1" "$WORK/ends.csv" "$topic" <<'PY'
import sys, os, json, time, re
table, ends_file, topic = sys.argv[1:]
ends = {}
for line in open(ends_file):
    m = re.findall(r"-?\d+", line)
    if len(m) >= 2:
        ends[int(m[0])] = int(m[1])
start, seen, parsed = time.time(), {}, set()
while True:
    log = os.path.join(table, "_delta_log")
    for name in sorted(os.listdir(log)) if os.path.isdir(log) else []:
        if not name.endswith(".json") or name in parsed:
            continue
        parsed.add(name)
        for line in open(os.path.join(log, name)):
            txn = json.loads(line).get("txn")
            if txn and txn["appId"].startswith(f"bench/kafka/{topic}/"):
                p = int(txn["appId"].rsplit("/", 1)[1])
                seen[p] = max(seen.get(p, 0), txn["version"])
    if ends and all(seen.get(p, 0) >= e for p, e in ends.items()):
        print(f"{time.time() - start:.2f}")
        break
    if time.time() - start > 900:
        print("timeout"); break
    time.sleep(0.2)
PY
}
printf '%-10s %9s %12s\n' members seconds quotes/s
for members in 1 2 1 2; do
  table="$WORK/load-$members-$RANDOM"
  group="$topic-$members-$RANDOM"
  sql "$topic" consumer "$table" | sed "s/'group.id' = '$topic'/'group.id' = '$group'/" > "$WORK/load.sql"
  for m in $(seq 1 "$members"); do
    taskset -c $((m - 1)) "$WEIR" run --follow "$WORK/load.sql" 2> "$WORK/load-$members-$m.log" &
    PIDS+=($!)
  done
  secs=$(done_when "$table")
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  python3 -c "import sys; s=sys.argv[2]; print(f'{sys.argv[1]:<10} {s:>9} {int(int(sys.argv[3])/float(s)) if s != \"timeout\" else 0:>12,}')" "$members" "$secs" "$N"
done
