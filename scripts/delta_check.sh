#!/usr/bin/env bash
# Delta tables written by `weir run` must read, as any engine reads them, with the Python
# `deltalake` package (delta-rs's own binding, not weir's code) and pyarrow: quotes through a
# source with state into a local table and into one on the S3-compatible store at
# WEIR_S3_ENDPOINT (scripts/objectstore.sh), and 100 ms bars of a windowed query, compared row
# for row with the same query's Parquet step files. Installs pyarrow and deltalake into the
# virtualenv under ~/.cache when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
WEIR="$CARGO_TARGET_DIR/debug/weir"
[ -x "$WEIR" ] || cargo build -p weir --locked
: "${WEIR_S3_ENDPOINT:?start scripts/objectstore.sh and export its lines first}"
: "${WEIR_S3_BUCKET:?name a bucket of the object store in WEIR_S3_BUCKET}"
VENV="${WEIR_VENV:-$HOME/.cache/weir-venv}"
if ! "$VENV/bin/python" -c "import deltalake, pyarrow" 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check pyarrow "deltalake==1.6.6"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
TABLE="s3://$WEIR_S3_BUCKET/delta-check-$$"
"$WEIR" gen quotes --count 20000 --seed 7 --duplicates 0.1 --out "$WORK/q.bin" \
  --schema-dir "$WORK/schema" 2>/dev/null
S3="'s3.endpoint' = '$WEIR_S3_ENDPOINT', 's3.region' = 'us-east-1',
    's3.access.key.id' = '$WEIR_S3_ACCESS_KEY', 's3.secret.access.key' = '\${env:WEIR_S3_SECRET_KEY}'"
source_sql() {
  cat <<SQL
CREATE SOURCE quotes (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT,
                      bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED,
                      WATERMARK FOR timestamp AS timestamp - INTERVAL '50 milliseconds')
  WITH ('connector' = 'file', 'path' = '$WORK/q.bin', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb',
        'state.dir' = '$WORK/$1', 'dedup.key' = 'ticker,sequence_number',
        'commit.interval' = '2000 rows');
SQL
}
BARS="SELECT window_start, window_end, ticker, count(*) AS n, min(bid_price) AS lo, max(ask_price) AS hi
  FROM TUMBLE(quotes, timestamp, INTERVAL '100 milliseconds') GROUP BY window_start, window_end, ticker"
{ source_sql state-local
  echo "CREATE SINK local FROM quotes WITH ('connector' = 'delta', 'path' = '$WORK/local', 'partition.by' = 'ticker');"; } > "$WORK/local.sql"
{ source_sql state-s3
  echo "CREATE SINK lake FROM quotes WITH ('connector' = 'delta', 'path' = '$TABLE/quotes', $S3);"; } > "$WORK/s3.sql"
{ source_sql state-bars
  echo "CREATE SINK bars FROM ($BARS) WITH ('connector' = 'delta', 'path' = '$TABLE/bars', $S3);"; } > "$WORK/bars.sql"
{ source_sql state-ref
  echo "CREATE SINK ref FROM ($BARS) WITH ('connector' = 'parquet', 'path' = '$WORK/ref');"; } > "$WORK/ref.sql"
for p in local s3 bars ref; do
  "$WEIR" run --quiet "$WORK/$p.sql"
done

"$VENV/bin/python" - "$WORK" "$TABLE" <<'PY'
import glob, os, sys
import pyarrow as pa, pyarrow.parquet as pq
import deltalake
from deltalake import DeltaTable
work, table = sys.argv[1], sys.argv[2]
opts = {"AWS_ENDPOINT_URL": os.environ["WEIR_S3_ENDPOINT"], "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": os.environ["WEIR_S3_ACCESS_KEY"],
        "AWS_SECRET_ACCESS_KEY": os.environ["WEIR_S3_SECRET_KEY"], "AWS_ALLOW_HTTP": "true",
        "conditional_put": "etag"}
local = DeltaTable(f"{work}/local")
s3 = DeltaTable(f"{table}/quotes", storage_options=opts)
for name, dt in (("local", local), ("s3", s3)):
    t = dt.to_pyarrow_table()
    keys = list(zip(t.column("ticker").to_pylist(), t.column("sequence_number").to_pylist()))
    assert len(keys) == len(set(keys)), f"{name}: doubled keys"
    assert 17000 < t.num_rows < 20000, f"{name}: {t.num_rows} rows"
    assert t.schema.field("bid_size").type == pa.int32(), t.schema
    app = "local" if name == "local" else "lake"
    step = dt.transaction_version(app)
    position = dt.transaction_version(f"{app}/file:{work}/q.bin")
    assert step and step >= 1, f"{name}: step txn {step}"
    assert position == os.path.getsize(f"{work}/q.bin"), f"{name}: the table says the file is read to {position}, not its end"
    print(f"deltalake {deltalake.__version__}: {name} table version {dt.version()}, "
          f"{t.num_rows} distinct quotes, {len(dt.file_uris())} files, step {step}, position {position}")
assert local.metadata().partition_columns == ["ticker"]
assert sorted(local.to_pyarrow_table().column("sequence_number").to_pylist()) == \
       sorted(s3.to_pyarrow_table().column("sequence_number").to_pylist())
bars = DeltaTable(f"{table}/bars", storage_options=opts).to_pyarrow_table()
ref = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(f"{work}/ref/*.parquet"))])
def rows(t):
    t = t.cast(pa.schema([pa.field(f.name, pa.timestamp("us") if pa.types.is_timestamp(f.type) else f.type)
                          for f in t.schema]))
    return sorted(zip(*[t.column(c).to_pylist() for c in ["window_start", "window_end", "ticker", "n", "lo", "hi"]]))
assert rows(bars) == rows(ref), "the Delta bars differ from the Parquet bars"
print(f"deltalake: {bars.num_rows} windowed bars equal the Parquet sink's")
# Every check has passed. Leave without the interpreter's teardown: deltalake's native runtime
# has aborted there ("terminate called without an active exception") after a passing run.
sys.stdout.flush()
os._exit(0)
PY
