#!/usr/bin/env bash
# Windows exactly once under kill -9. Quotes (about 10% exact repeats) go into a local Kafka
# topic in chunks, each chunk a later stretch of event time; after each chunk, `weir run` feeds
# a windowed query (100 ms tumbling bars by ticker: count, min, max, first and last bid) over a
# source with 'state.dir' and 'dedup.key' into Parquet, and is killed with SIGKILL at a random
# moment. Once WEIR_CRASH_KILLS (default 20) kills have landed on a running weir, a last run
# finishes the topic. pyarrow then reads the committed files and compares every window with the
# bars Python computes from the generator's own output (written as JSON, deduplicated in Python):
# each window exactly once, with exactly those values, and no other.
#
# Uses the broker at WEIR_KAFKA_BOOTSTRAP, or starts one with scripts/kafka.sh (and stops it).
# WEIR_CRASH_CHUNK sets the messages per chunk (default 30000), WEIR_CRASH_SEED the first seed.
#
# WEIR_CRASH_SINK=delta writes the bars into a Delta table on the S3-compatible store at
# WEIR_S3_ENDPOINT (scripts/objectstore.sh; credentials in WEIR_S3_ACCESS_KEY/WEIR_S3_SECRET_KEY,
# bucket WEIR_S3_BUCKET) instead of Parquet step files, and the check reads the table with the
# Python `deltalake` package (delta-rs's own binding).
#
# WEIR_CRASH_SINK=kafka writes the bars as JSON records to a second topic of the broker, one
# transaction a step, and the check reads that topic with confluent-kafka (librdkafka) at
# isolation.level=read_committed.
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS="${WEIR_CRASH_KILLS:-20}"
CHUNK="${WEIR_CRASH_CHUNK:-30000}"
SEED="${WEIR_CRASH_SEED:-$RANDOM}"
SINK_KIND="${WEIR_CRASH_SINK:-parquet}"
CRASH_NAME=window-crash
. scripts/crash_setup.sh
TOPIC="weir-window-crash-$$-$SEED"
echo "window crash test: broker $WEIR_KAFKA_BOOTSTRAP, topic $TOPIC, $KILLS kills, $CHUNK messages a chunk, seed $SEED"
if [ "$SINK_KIND" = delta ]; then
  if ! "$VENV/bin/python" -c "import deltalake" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "deltalake==1.6.6"
  fi
  TABLE="s3://$WEIR_S3_BUCKET/window-crash-$$-$SEED"
  SINK_WITH="'connector' = 'delta', 'path' = '$TABLE',
  's3.endpoint' = '$WEIR_S3_ENDPOINT', 's3.region' = 'us-east-1',
  's3.access.key.id' = '$WEIR_S3_ACCESS_KEY', 's3.secret.access.key' = '\${env:WEIR_S3_SECRET_KEY}'"
  echo "window crash test: into the Delta table $TABLE"
elif [ "$SINK_KIND" = kafka ]; then
  if ! "$VENV/bin/python" -c "import confluent_kafka" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "confluent-kafka==2.16.0"
  fi
  TABLE=""
  OUT_TOPIC="$TOPIC-bars"
  "$VENV/bin/python" - "$WEIR_KAFKA_BOOTSTRAP" "$OUT_TOPIC" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in admin.create_topics([NewTopic(sys.argv[2], num_partitions=3, replication_factor=1)]).values():
    f.result()
PY
  SINK_WITH="'connector' = 'kafka', 'brokers' = '$WEIR_KAFKA_BOOTSTRAP', 'topic' = '$OUT_TOPIC',
  'encoding' = 'json', 'key' = 'ticker', 'transactional.id' = 'crash-$OUT_TOPIC'"
  echo "window crash test: into the topic $OUT_TOPIC, one transaction a step"
else
  TABLE=""
  SINK_WITH="'connector' = 'parquet', 'path' = '$WORK/out'"
fi

"$WEIR" gen quotes --count 1 --out "$WORK/unused.bin" --schema-dir "$WORK/schema" 2>/dev/null
cat > "$WORK/p.sql" <<SQL
CREATE SOURCE quotes (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT,
                      bid_price DOUBLE, ask_price DOUBLE,
                      WATERMARK FOR timestamp AS timestamp - INTERVAL '50 milliseconds')
  WITH ('connector' = 'kafka', 'brokers' = '$WEIR_KAFKA_BOOTSTRAP', 'topic' = '$TOPIC',
        'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO',
        'location' = '$WORK/schema/stocks.pb',
        'state.dir' = '$WORK/state', 'dedup.key' = 'ticker,sequence_number',
        'commit.interval' = '150ms, 3000 rows');
CREATE SINK bars FROM (
  SELECT window_start, window_end, ticker, count(*) AS n, min(bid_price) AS lo,
         max(ask_price) AS hi, first_value(bid_price ORDER BY timestamp) AS first_bid,
         last_value(bid_price ORDER BY timestamp) AS last_bid
  FROM TUMBLE(quotes, timestamp, INTERVAL '100 milliseconds')
  GROUP BY window_start, window_end, ticker
) WITH ($SINK_WITH);
SQL

# Chunk c covers event time from 2026-03-02T14:30:00Z + c seconds, 100,000 quotes a second:
# 0.3 s of a chunk's 1 s, so a chunk's windows hold only its own quotes.
start_of() { date -u -d "@$((1772461800 + $1))" +%Y-%m-%dT%H:%M:%SZ; }
chunk=0
landed=0
finished_early=0
while [ "$landed" -lt "$KILLS" ]; do
  chunk=$((chunk + 1))
  if [ "$chunk" -gt $((KILLS * 3)) ]; then
    echo "window crash test: only $landed of $KILLS kills landed in $((chunk - 1)) runs" >&2
    exit 1
  fi
  seed=$((SEED + chunk))
  start="$(start_of "$chunk")"
  "$WEIR" gen quotes --count "$CHUNK" --seed "$seed" --duplicates 0.1 --start "$start" \
    --per-second 100000 --to "kafka://$WEIR_KAFKA_BOOTSTRAP/$TOPIC" --topic-partitions 3 2>/dev/null
  "$WEIR" gen quotes --count "$CHUNK" --seed "$seed" --duplicates 0.1 --start "$start" \
    --per-second 100000 --format json --out "$WORK/ref-$chunk.jsonl" 2>/dev/null
  run_and_kill "$chunk"
done
echo "window crash test: $landed kills landed, $finished_early runs ended before their kill; finishing"
finish_run
"$WEIR" stats "$WORK/state"

check_failed() {
  echo "window crash test: the last lines the runs logged:" >&2
  grep -v "^ *$" "$WORK/runs.log" | tail -60 >&2
  exit 1
}
"$VENV/bin/python" - "$WORK" "$chunk" "$TABLE" "${OUT_TOPIC:-}" "$WEIR_KAFKA_BOOTSTRAP" <<'PY' || check_failed
import glob, json, os, sys
import pyarrow as pa
import pyarrow.parquet as pq
work, chunks, table, topic, bootstrap = sys.argv[1], int(sys.argv[2]), *sys.argv[3:6]
WINDOW = 100_000_000  # ns
seen = set()
bars = {}
sent = 0
for c in range(1, chunks + 1):
    with open(f"{work}/ref-{c}.jsonl") as f:
        for line in f:
            q = json.loads(line)
            sent += 1
            b = q["base"]
            key = (b["ticker"], b["sequence_number"])
            if key in seen:  # dedup before the window: the first occurrence counts
                continue
            seen.add(key)
            t = b["timestamp"]
            w = t - t % WINDOW
            k = (w, b["ticker"])
            bid, ask = q.get("bid_price", 0.0), q.get("ask_price", 0.0)
            e = bars.get(k)
            if e is None:
                bars[k] = [1, bid, ask, (t, bid), (t, bid)]
            else:
                e[0] += 1
                e[1] = min(e[1], bid)
                e[2] = max(e[2], ask)
                if t < e[3][0]:
                    e[3] = (t, bid)
                if t >= e[4][0]:
                    e[4] = (t, bid)
if topic:
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"check-{topic}", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    rows, ended = [], set()
    at = []  # each record's (partition, offset), to place a doubled bar's copies
    while len(ended) < 3:
        m = consumer.poll(10)
        if m is None:
            sys.exit("window crash test: no record nor partition end from the topic in 10 s")
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                ended.add(m.partition())
                continue
            sys.exit(f"window crash test: reading the output topic: {m.error()}")
        rows.append(json.loads(m.value()))
        at.append((m.partition(), m.offset()))
    consumer.close()
    t = pa.Table.from_pylist(rows)
    for c in ("window_start", "window_end"):  # JSON holds them as RFC 3339 text
        t = t.set_column(t.schema.get_field_index(c), c, t.column(c).cast(pa.timestamp("ns")))
    parts = [t]
    where = f"the topic ({len(rows)} committed records)"
elif table:
    from deltalake import DeltaTable
    opts = {"AWS_ENDPOINT_URL": os.environ["WEIR_S3_ENDPOINT"], "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": os.environ["WEIR_S3_ACCESS_KEY"],
            "AWS_SECRET_ACCESS_KEY": os.environ["WEIR_S3_SECRET_KEY"], "AWS_ALLOW_HTTP": "true",
            "conditional_put": "etag"}
    dt = DeltaTable(table, storage_options=opts)
    parts = [dt.to_pyarrow_table()]
    where = f"the Delta table (version {dt.version()}, step {dt.transaction_version('bars')})"
else:
    files = sorted(glob.glob(f"{work}/out/*.parquet"))
    leftovers = [n for n in os.listdir(f"{work}/out") if n.endswith(".tmp")]
    assert not leftovers, f"temporary files left after the final run: {leftovers}"
    parts = [pq.read_table(path) for path in files]
    where = f"{len(files)} committed files"
def ns(col):  # Delta keeps microseconds, the step files nanoseconds
    return col.cast(pa.timestamp("ns", tz=col.type.tz)).cast(pa.int64()).to_pylist()
got = {}
first_at = {}
doubled = 0
# A doubled bar with the same values is a step written twice (the sink); with other values, a
# window emitted before all its rows came and again after (the watermark): told apart here.
copies = []
for t in parts:
    starts, ends = ns(t.column("window_start")), ns(t.column("window_end"))
    cols = [t.column(c).to_pylist() for c in ("ticker", "n", "lo", "hi", "first_bid", "last_bid")]
    for i, (s, e) in enumerate(zip(starts, ends)):
        assert e - s == WINDOW, (s, e)
        k = (s, cols[0][i])
        v = [cols[1][i], cols[2][i], cols[3][i], cols[4][i], cols[5][i]]
        where_now = at[i] if topic else None
        if k in got:
            doubled += 1
            copies.append((k, got[k], v, first_at.get(k), where_now))
        else:
            first_at[k] = where_now
        got[k] = v
want = {k: [v[0], v[1], v[2], v[3][1], v[4][1]] for k, v in bars.items()}
missing = [k for k in want if k not in got]
extra = [k for k in got if k not in want]
wrong = [k for k in want if k in got and got[k] != want[k]]
print(f"window crash test: {sent} messages sent, {len(seen)} distinct, {len(want)} bars expected; "
      f"{where}: {len(got)} bars, {doubled} doubled, {len(missing)} missing, "
      f"{len(extra)} unexpected, {len(wrong)} with other values")
for k in wrong[:5]:
    print("  ", k, "want", want[k], "got", got[k])
if copies:
    same = sum(1 for _, a, b, _, _ in copies if a == b)
    starts = sorted(c[0][0] for c in copies)
    print(f"  doubled bars: {same} with the same values, {len(copies) - same} with other values; "
          f"window starts {starts[0]} to {starts[-1]} (ns)")
    for k, a, b, first, then in copies[:5]:
        # In a topic: (partition, offset) of each copy, to tell one transaction from two.
        print("  ", k, "first", a, "at", first, "then", b, "at", then)
    if topic:
        for name, pick in (("first", 3), ("second", 4)):
            spans = {}
            for c in copies:
                part, off = c[pick]
                lo, hi = spans.get(part, (off, off))
                spans[part] = (min(lo, off), max(hi, off))
            print(f"   offsets of the {name} copies by partition:", dict(sorted(spans.items())))
assert doubled == 0 and not missing and not extra and not wrong, "exactly-once windows violated"
assert len(seen) < sent, "the stream had no duplicates to drop"
PY
echo "window crash test: passed$(store_crash_note)"
