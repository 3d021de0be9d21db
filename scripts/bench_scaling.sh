#!/usr/bin/env bash
# How weir uses cores: the options-quotes GROUP BY ticker of the README on 1 to 16 partitions,
# whole process, on protobuf (varint-framed) and on JSON lines, and DuckDB's read_ndjson on the
# same JSON with as many threads. Prints a Markdown table (wall seconds, and user + system CPU
# seconds, of each run) for BENCHMARKS.md.
#
#   scripts/bench_scaling.sh [PROTOBUF_COUNT] [JSON_COUNT]     (default 50,000,000 and 20,000,000)
#
# WEIR_BIN: the weir program (default: a release build of this tree). WEIR_BIN_BEFORE: a
# second weir program (an earlier build) measured in the same run, alternating with the first.
# WEIR_SCALING_PARTS: the partition counts (default "1 2 4 8 12 16"). WEIR_SCALING_RUNS: runs
# of each (default 2). WEIR_SCALING_DIR: where the data goes (default /tmp/weir-scaling).
# WEIR_SCALING_WEIR=no: DuckDB alone. DuckDB is measured when `python3 -c 'import duckdb'` works.
# WEIR_SCALING_QUERY=copy: instead of the GROUP BY, every row's ticker, timestamp, sequence
# number, prices and sizes copied into one zstd Parquet file (weir's `--output`, DuckDB's COPY).
set -euo pipefail
cd "$(dirname "$0")/.."
PB_COUNT="${1:-50000000}"
JSON_COUNT="${2:-20000000}"
DIR="${WEIR_SCALING_DIR:-/tmp/weir-scaling}"
PARTS="${WEIR_SCALING_PARTS:-1 2 4 8 12 16}"
RUNS="${WEIR_SCALING_RUNS:-2}"
# shellcheck source=scripts/release_weir.sh
source scripts/release_weir.sh
# shellcheck source=scripts/quotes_workload.sh
source scripts/quotes_workload.sh
quotes_workload "$DIR" "$PB_COUNT" "$JSON_COUNT"
QUERY="${WEIR_SCALING_QUERY:-group}"
case "$QUERY" in
  group) PB_SQL="$DIR/protobuf.sql" JSON_SQL="$DIR/json.sql" OUTPUT=() ;;
  copy) PB_SQL="$DIR/protobuf_copy.sql" JSON_SQL="$DIR/json_copy.sql" OUTPUT=(--output "$DIR/copy.parquet") ;;
  *) echo "WEIR_SCALING_QUERY is group or copy, not '$QUERY'" >&2; exit 2 ;;
esac
cat > "$DIR/duckdb_query.py" <<'PY'
import sys, duckdb
con = duckdb.connect()
con.execute(f"SET threads = {int(sys.argv[2])}")
if sys.argv[3] == "copy":
    con.execute(
        "COPY (SELECT base.ticker AS ticker, make_timestamp_ns(base.timestamp) AS timestamp, "
        "base.sequence_number AS sequence_number, bid_price, ask_price, bid_size, ask_size "
        f"FROM read_ndjson(?)) TO '{sys.argv[4]}' (FORMAT parquet, COMPRESSION zstd)", [sys.argv[1]])
    assert con.execute(f"SELECT count(*) FROM '{sys.argv[4]}'").fetchone()[0] > 0
else:
    rows = con.execute(
        "SELECT base.ticker AS ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) "
        "FROM read_ndjson(?) GROUP BY 1", [sys.argv[1]]).fetchall()
    assert len(rows) > 0
PY
DUCKDB=no
python3 -c 'import duckdb' 2>/dev/null && DUCKDB=yes

# Runs a command; appends "wall cpu" to the named list.
declare -A res
measure() { # key command...
  local key=$1 t; shift
  TIMEFORMAT='%R %U %S'
  t=$( { time "$@" >/dev/null 2>"$DIR/last.err"; } 2>&1 ) || { cat "$DIR/last.err" >&2; exit 1; }
  res[$key]="${res[$key]:-} $(echo "$t" | awk '{ printf "%.2f/%.2f", $1, $2 + $3 }')"
}
for p in $PARTS; do
  for _ in $(seq "$RUNS"); do
    for side in after before; do
      [ "${WEIR_SCALING_WEIR:-yes}" = no ] && continue
      bin=$WEIR_BIN
      if [ "$side" = before ]; then bin="${WEIR_BIN_BEFORE:-}"; [ -n "$bin" ] || continue; fi
      measure "$side-pb-$p" "$bin" run --quiet --partitions "$p" "${OUTPUT[@]}" "$PB_SQL"
      measure "$side-json-$p" "$bin" run --quiet --partitions "$p" "${OUTPUT[@]}" "$JSON_SQL"
    done
    if [ "$DUCKDB" = yes ]; then
      measure "duckdb-$p" python3 "$DIR/duckdb_query.py" "$JSON" "$p" "$QUERY" "$DIR/copy.parquet"
    fi
  done
done

echo "date: $(date -u +%Y-%m-%d)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "query: $QUERY"
echo "$PB_COUNT protobuf quotes ($(du -h "$PB" | cut -f1)), $JSON_COUNT JSON quotes ($(du -h "$JSON" | cut -f1)); each cell: wall s / user+sys s, $RUNS runs"
echo
head="| P |" sep="|---|"
if [ "${WEIR_SCALING_WEIR:-yes}" != no ]; then
  head="$head weir protobuf | weir JSON |" sep="$sep---|---|"
  [ -n "${WEIR_BIN_BEFORE:-}" ] && { head="$head before: protobuf | before: JSON |"; sep="$sep---|---|"; }
fi
[ "$DUCKDB" = yes ] && { head="$head DuckDB read_ndjson |"; sep="$sep---|"; }
echo "$head"
echo "$sep"
for p in $PARTS; do
  line="| $p |"
  if [ "${WEIR_SCALING_WEIR:-yes}" != no ]; then
    line="$line ${res[after-pb-$p]# } | ${res[after-json-$p]# } |"
    [ -n "${WEIR_BIN_BEFORE:-}" ] && line="$line ${res[before-pb-$p]# } | ${res[before-json-$p]# } |"
  fi
  [ "$DUCKDB" = yes ] && line="$line ${res[duckdb-$p]# } |"
  echo "$line"
done
