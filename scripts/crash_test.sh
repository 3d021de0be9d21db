#!/usr/bin/env bash
# Exactly-once under kill -9. A keyed quote stream with about 10% duplicates goes into a local
# Kafka topic in chunks; after each chunk, `weir run` ingests it into Parquet through a source
# with 'state.dir' and 'dedup.key' = 'ticker,sequence_number', and is killed with SIGKILL at a
# random moment. Once WEIR_CRASH_KILLS (default 20) kills have landed on a running weir, a last
# run finishes the topic. pyarrow then reads the committed files and checks that they hold every
# distinct key of the stream exactly once and nothing else; the reference key set comes from
# the same generator written as JSON, read by Python, not from weir.
#
# Uses the broker at WEIR_KAFKA_BOOTSTRAP, or starts one with scripts/kafka.sh (and stops it).
# WEIR_CRASH_CHUNK sets the messages per chunk (default 30000), WEIR_CRASH_SEED the first seed.
#
# WEIR_CRASH_SINK=delta writes a Delta table on the S3-compatible store at WEIR_S3_ENDPOINT
# (scripts/objectstore.sh; credentials in WEIR_S3_ACCESS_KEY/WEIR_S3_SECRET_KEY, bucket
# WEIR_S3_BUCKET) instead of Parquet step files, and the check reads the table with the Python
# `deltalake` package (delta-rs's own binding): every key once, and the table's transaction
# versions equal to the positions the state committed.
#
# WEIR_CRASH_SINK=delta-stateless does the same with a source without 'state.dir' (no dedup):
# the table alone records the positions, and the check is that every message of the topic,
# repeats included, is in the table exactly once by (partition, offset).
#
# WEIR_CRASH_SINK=kafka writes the rows as protobuf records (a schema the check builds with
# Google's protobuf package) to a second topic of the broker, one transaction a step, and the
# check reads that topic with confluent-kafka (librdkafka) at isolation.level=read_committed
# and decodes each record with Google's protobuf: every distinct key exactly once, as for
# Parquet.
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS="${WEIR_CRASH_KILLS:-20}"
CHUNK="${WEIR_CRASH_CHUNK:-30000}"
SEED="${WEIR_CRASH_SEED:-$RANDOM}"
SINK_KIND="${WEIR_CRASH_SINK:-parquet}"
CRASH_NAME=crash
. scripts/crash_setup.sh
TOPIC="weir-crash-$$-$SEED"
echo "crash test: broker $WEIR_KAFKA_BOOTSTRAP, topic $TOPIC, $KILLS kills, $CHUNK messages a chunk, seed $SEED"

"$WEIR" gen quotes --count 1 --out "$WORK/unused.bin" --schema-dir "$WORK/schema" 2>/dev/null
cat > "$WORK/p.sql" <<SQL
CREATE SOURCE quotes (ticker VARCHAR, sequence_number BIGINT, bid_price DOUBLE, ask_price DOUBLE)
  INCLUDE partition AS kafka_partition INCLUDE offset AS kafka_offset
  WITH ('connector' = 'kafka', 'brokers' = '$WEIR_KAFKA_BOOTSTRAP', 'topic' = '$TOPIC',
        'encoding' = 'protobuf', 'message' = 'stocks.QuoteNBBO',
        'location' = '$WORK/schema/stocks.pb',
        $([ "$SINK_KIND" = delta-stateless ] || echo "'state.dir' = '$WORK/state', 'dedup.key' = 'ticker,sequence_number',")
        'commit.interval' = '150ms, 3000 rows');
SQL
if [ "$SINK_KIND" = delta ] || [ "$SINK_KIND" = delta-stateless ]; then
  if ! "$VENV/bin/python" -c "import deltalake" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "deltalake==1.6.6"
  fi
  TABLE="s3://$WEIR_S3_BUCKET/crash-$$-$SEED"
  cat >> "$WORK/p.sql" <<SQL
CREATE SINK out FROM quotes WITH ('connector' = 'delta', 'path' = '$TABLE',
  's3.endpoint' = '$WEIR_S3_ENDPOINT', 's3.region' = 'us-east-1',
  's3.access.key.id' = '$WEIR_S3_ACCESS_KEY', 's3.secret.access.key' = '\${env:WEIR_S3_SECRET_KEY}');
SQL
  echo "crash test: into the Delta table $TABLE"
elif [ "$SINK_KIND" = kafka ]; then
  if ! "$VENV/bin/python" -c "import confluent_kafka, google.protobuf" 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "confluent-kafka==2.16.0" protobuf
  fi
  OUT_TOPIC="$TOPIC-out"
  # The topic, and the records' schema as a descriptor set (for weir's 'location'), built by
  # Google's protobuf package, which decodes the records in the check.
  "$VENV/bin/python" - "$WEIR_KAFKA_BOOTSTRAP" "$OUT_TOPIC" "$WORK/row.pb" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
from google.protobuf import descriptor_pb2
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
for f in admin.create_topics([NewTopic(sys.argv[2], num_partitions=3, replication_factor=1)]).values():
    f.result()
T = descriptor_pb2.FieldDescriptorProto
fd = descriptor_pb2.FileDescriptorProto(name="row.proto", package="crash", syntax="proto3")
m = fd.message_type.add(name="Row")
for n, (name, t) in enumerate([("ticker", T.TYPE_STRING), ("sequence_number", T.TYPE_INT64),
                               ("bid_price", T.TYPE_DOUBLE), ("ask_price", T.TYPE_DOUBLE),
                               ("kafka_partition", T.TYPE_SINT32), ("kafka_offset", T.TYPE_FIXED64)], 1):
    m.field.add(name=name, number=n, type=t, label=T.LABEL_OPTIONAL)
open(sys.argv[3], "wb").write(descriptor_pb2.FileDescriptorSet(file=[fd]).SerializeToString())
PY
  cat >> "$WORK/p.sql" <<SQL
CREATE SINK out FROM quotes WITH ('connector' = 'kafka', 'brokers' = '$WEIR_KAFKA_BOOTSTRAP',
  'topic' = '$OUT_TOPIC', 'encoding' = 'protobuf', 'message' = 'crash.Row',
  'location' = '$WORK/row.pb', 'key' = 'ticker', 'transactional.id' = 'crash-$OUT_TOPIC');
SQL
  echo "crash test: into the topic $OUT_TOPIC, one transaction a step"
else
  echo "CREATE SINK out FROM quotes WITH ('connector' = 'parquet', 'path' = '$WORK/out');" >> "$WORK/p.sql"
fi

chunk=0
landed=0
finished_early=0
while [ "$landed" -lt "$KILLS" ]; do
  chunk=$((chunk + 1))
  if [ "$chunk" -gt $((KILLS * 3)) ]; then
    echo "crash test: only $landed of $KILLS kills landed in $((chunk - 1)) runs" >&2
    exit 1
  fi
  seed=$((SEED + chunk))
  "$WEIR" gen quotes --count "$CHUNK" --seed "$seed" --duplicates 0.1 \
    --to "kafka://$WEIR_KAFKA_BOOTSTRAP/$TOPIC" --topic-partitions 3 2>/dev/null
  "$WEIR" gen quotes --count "$CHUNK" --seed "$seed" --duplicates 0.1 --format json \
    --out "$WORK/ref-$chunk.jsonl" 2>/dev/null
  run_and_kill "$chunk"
done
echo "crash test: $landed kills landed, $finished_early runs ended before their kill; finishing"
finish_run

if [ "$SINK_KIND" = delta-stateless ]; then
"$VENV/bin/python" - "$WORK" "$chunk" "$TABLE" <<'PY'
import json, os, sys
from deltalake import DeltaTable
work, chunks, table = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sent = sum(1 for c in range(1, chunks + 1) for _ in open(f"{work}/ref-{c}.jsonl"))
opts = {"AWS_ENDPOINT_URL": os.environ["WEIR_S3_ENDPOINT"], "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": os.environ["WEIR_S3_ACCESS_KEY"],
        "AWS_SECRET_ACCESS_KEY": os.environ["WEIR_S3_SECRET_KEY"], "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag"}
dt = DeltaTable(table, storage_options=opts)
t = dt.to_pyarrow_table(columns=["kafka_partition", "kafka_offset"])
got = list(zip(t.column("kafka_partition").to_pylist(), t.column("kafka_offset").to_pylist()))
seen = set(got)
doubled = len(got) - len(seen)
# Every offset of every partition from 0 to its end: nothing missing.
ends = {}
for p, o in seen:
    ends[p] = max(ends.get(p, -1), o)
missing = sum(ends[p] + 1 for p in ends) - len(seen)
# The positions the last commit names, against the table's txn versions and the rows.
last = next(h for h in dt.history() if h.get("weir.appId") == "out")
positions = last["weir.positions"]
wrong = {n: (v, dt.transaction_version(f"out/{n}"), ends.get(int(n.rsplit("/", 1)[1]), -1) + 1)
         for n, v in positions.items()
         if not v == dt.transaction_version(f"out/{n}") == ends.get(int(n.rsplit("/", 1)[1]), -1) + 1}
print(f"crash test: {sent} messages sent; the Delta table (version {dt.version()}, step "
      f"{dt.transaction_version('out')}) holds {len(got)} rows, {doubled} doubled, {missing} missing "
      f"offsets; {len(positions)} partition positions, {len(wrong)} differ from the txn versions "
      f"or the rows")
assert positions and not wrong, f"positions, txn versions and rows disagree: {wrong}"
assert doubled == 0 and missing == 0 and len(got) == sent, "exactly-once violated"
PY
echo "crash test: passed$(store_crash_note)"
exit 0
fi
"$WEIR" stats "$WORK/state"

if [ "$SINK_KIND" = delta ]; then
"$WEIR" stats "$WORK/state" > "$WORK/stats.txt"
"$VENV/bin/python" - "$WORK" "$chunk" "$TABLE" <<'PY'
import json, os, sys
from deltalake import DeltaTable
work, chunks, table = sys.argv[1], int(sys.argv[2]), sys.argv[3]
expected = set()
sent = 0
for c in range(1, chunks + 1):
    with open(f"{work}/ref-{c}.jsonl") as f:
        for line in f:
            q = json.loads(line)
            expected.add((q["base"]["ticker"], q["base"]["sequence_number"]))
            sent += 1
opts = {"AWS_ENDPOINT_URL": os.environ["WEIR_S3_ENDPOINT"], "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": os.environ["WEIR_S3_ACCESS_KEY"],
        "AWS_SECRET_ACCESS_KEY": os.environ["WEIR_S3_SECRET_KEY"], "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag"}
dt = DeltaTable(table, storage_options=opts)
t = dt.to_pyarrow_table(columns=["ticker", "sequence_number"])
got = list(zip(t.column("ticker").to_pylist(), t.column("sequence_number").to_pylist()))
seen = set(got)
doubled = len(got) - len(seen)
missing = expected - seen
extra = seen - expected
# The table's transaction versions against the positions the state committed (weir stats).
positions = {}
in_positions = False
for line in open(f"{work}/stats.txt"):
    if line.startswith("read positions"):
        in_positions = True
        continue
    if in_positions and line.startswith("  "):
        name, nxt = line.split()
        positions[name] = int(nxt)
    elif in_positions:
        in_positions = False
txns = {p: dt.transaction_version(f"out/{p}") for p in positions}
wrong = {p: (n, txns[p]) for p, n in positions.items() if txns[p] != n}
print(f"crash test: {sent} messages sent, {len(expected)} distinct keys; the Delta table "
      f"(version {dt.version()}, step {dt.transaction_version('out')}) holds {len(got)} rows, {doubled} doubled, "
      f"{len(missing)} missing, {len(extra)} unexpected; {len(positions)} partition positions, "
      f"{len(wrong)} differ from the table's txn versions")
assert positions, "the state committed no positions"
assert not wrong, f"table txn versions differ from the committed positions: {wrong}"
assert doubled == 0 and not missing and not extra, "exactly-once violated"
assert len(expected) < sent, "the stream had no duplicates to drop"
PY
echo "crash test: passed$(store_crash_note)"
exit 0
fi

if [ "$SINK_KIND" = kafka ]; then
"$VENV/bin/python" - "$WORK" "$chunk" "$WEIR_KAFKA_BOOTSTRAP" "$OUT_TOPIC" <<'PY'
import json, sys
from confluent_kafka import Consumer, KafkaError, TopicPartition
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
work, chunks, bootstrap, topic = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
pool = descriptor_pool.DescriptorPool()
for f in descriptor_pb2.FileDescriptorSet.FromString(open(f"{work}/row.pb", "rb").read()).file:
    pool.Add(f)
Row = message_factory.GetMessageClass(pool.FindMessageTypeByName("crash.Row"))
expected = set()
sent = 0
for c in range(1, chunks + 1):
    with open(f"{work}/ref-{c}.jsonl") as f:
        for line in f:
            q = json.loads(line)
            expected.add((q["base"]["ticker"], q["base"]["sequence_number"]))
            sent += 1
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                     "isolation.level": "read_committed", "enable.partition.eof": True,
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
got, ended, offsets = [], set(), []
while len(ended) < 3:
    m = consumer.poll(10)
    if m is None:
        sys.exit("crash test: no record nor partition end from the output topic in 10 s")
    if m.error():
        if m.error().code() == KafkaError._PARTITION_EOF:
            ended.add(m.partition())
            continue
        sys.exit(f"crash test: reading the output topic: {m.error()}")
    row = Row.FromString(m.value())
    got.append((row.ticker, row.sequence_number))
    assert m.key().decode() == row.ticker, "a record's key is not its ticker"
    offsets.append((row.kafka_partition, row.kafka_offset))
consumer.close()
seen = set(got)
doubled = len(got) - len(seen)
missing = expected - seen
extra = seen - expected
print(f"crash test: {sent} messages sent, {len(expected)} distinct keys; the topic holds "
      f"{len(got)} committed records (protobuf, decoded by Google's protobuf), {doubled} "
      f"doubled, {len(missing)} missing, {len(extra)} unexpected")
# The input positions the records carry (sint32 and fixed64 fields) are each a real message's.
assert len(set(offsets)) == len(offsets) and all(p in (0, 1, 2) for p, _ in offsets), "bad positions"
assert doubled == 0 and not missing and not extra, "exactly-once violated"
assert len(expected) < sent, "the stream had no duplicates to drop"
PY
echo "crash test: passed$(store_crash_note)"
exit 0
fi

"$VENV/bin/python" - "$WORK" "$chunk" <<'PY'
import glob, json, os, sys
import pyarrow.parquet as pq
work, chunks = sys.argv[1], int(sys.argv[2])
expected = set()
sent = 0
for c in range(1, chunks + 1):
    with open(f"{work}/ref-{c}.jsonl") as f:
        for line in f:
            q = json.loads(line)
            expected.add((q["base"]["ticker"], q["base"]["sequence_number"]))
            sent += 1
files = sorted(glob.glob(f"{work}/out/*.parquet"))
leftovers = [n for n in os.listdir(f"{work}/out") if n.endswith(".tmp")]
assert not leftovers, f"temporary files left after the final run: {leftovers}"
got = []
for f in files:
    t = pq.read_table(f, columns=["ticker", "sequence_number"])
    got += list(zip(t.column("ticker").to_pylist(), t.column("sequence_number").to_pylist()))
seen = set(got)
doubled = len(got) - len(seen)
missing = expected - seen
extra = seen - expected
print(f"crash test: {sent} messages sent, {len(expected)} distinct keys; "
      f"{len(files)} committed files hold {len(got)} rows, {doubled} doubled, "
      f"{len(missing)} missing, {len(extra)} unexpected")
assert doubled == 0 and not missing and not extra, "exactly-once violated"
assert len(expected) < sent, "the stream had no duplicates to drop"
PY
echo "crash test: passed$(store_crash_note)"
