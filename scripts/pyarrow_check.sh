#!/usr/bin/env bash
# Parquet and Arrow IPC written by `weir run` must be readable by pyarrow. Installs pyarrow into a
# virtualenv under ~/.cache (once) and checks the files' rows, columns and values.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
WEIR="$CARGO_TARGET_DIR/debug/weir"
[ -x "$WEIR" ] || cargo build -p weir --locked
VENV="${WEIR_VENV:-$HOME/.cache/weir-venv}"
if ! "$VENV/bin/python" -c "import pyarrow" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check pyarrow
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$WEIR" gen quotes --count 5000 --out "$WORK/q.bin" --schema-dir "$WORK/schema" 2>/dev/null
cat > "$WORK/p.sql" <<SQL
CREATE SOURCE quotes (ticker VARCHAR, timestamp TIMESTAMP, bid_price DOUBLE, bid_size INT UNSIGNED, ...)
  INCLUDE offset AS off
  WITH ('connector' = 'file', 'path' = '$WORK/q.bin', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb');
CREATE SINK pq FROM quotes WITH ('connector' = 'parquet', 'path' = '$WORK/q.parquet');
CREATE SINK snappy FROM (SELECT ticker, bid_price FROM quotes WHERE bid_price < 1)
  WITH ('connector' = 'parquet', 'path' = '$WORK/cheap.parquet', 'compression' = 'snappy');
CREATE SINK ipc FROM quotes WITH ('connector' = 'ipc', 'path' = '$WORK/q.arrow');
SQL
"$WEIR" run --quiet "$WORK/p.sql"
"$VENV/bin/python" - "$WORK" <<'PY'
import sys, pyarrow.parquet as pq, pyarrow.ipc as ipc, pyarrow as pa
work = sys.argv[1]
t = pq.read_table(f"{work}/q.parquet")
assert t.num_rows == 5000, t.num_rows
assert t.column_names[:4] == ["ticker", "timestamp", "bid_price", "bid_size"], t.column_names
assert t.schema.field("timestamp").type == pa.timestamp("ns"), t.schema
assert t.schema.field("base").type.num_fields == 3, t.schema
assert t.column("off")[0].as_py() == 0
assert t.column("ticker")[0].as_py().startswith("O:")
cheap = pq.read_table(f"{work}/cheap.parquet")
assert 0 < cheap.num_rows < 5000 and max(cheap.column("bid_price").to_pylist()) < 1
a = ipc.open_file(f"{work}/q.arrow").read_all()
assert a.num_rows == 5000 and a.column("ticker").to_pylist() == t.column("ticker").to_pylist()
print(f"pyarrow {pa.__version__} read weir's parquet ({t.num_rows} rows, {cheap.num_rows} cheap) and ipc")
PY
