#!/usr/bin/env bash
# weir against ClickHouse (chdb) and DuckDB end to end: the options-quotes GROUP BY ticker of
# the README over COUNT quotes, each run a whole process on every core: weir and chdb on the
# varint-framed protobuf file (ClickHouse's `Protobuf` format, schema from stocks.proto), weir
# and DuckDB (`read_ndjson`) on the same quotes as JSON lines. A benchmark, not a test.
#
#   scripts/bench_peers.sh [COUNT]        (default 20,000,000)
#
# WEIR_BIN: the weir program (default: a release build of this tree). WEIR_BIN_BEFORE: a second
# weir program (an earlier build), measured in the same rounds. WEIR_PEERS_PYTHON: a Python
# with `chdb` and `duckdb` installed (default python3; `pip install chdb duckdb`); an engine it
# cannot import is left out. WEIR_PEERS_RUNS: rounds (default 3); each round runs every
# contender once, in turn, so the machine's noise falls on all alike. WEIR_PEERS_DIR: where the
# data goes (default /tmp/weir-peers). Each peer's answer is checked: its counts add up to COUNT.
# Prints Markdown: wall and user + system CPU seconds of every run, the fastest and median
# wall time, and each peer's fastest time over weir's.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT="${1:-20000000}"
RUNS="${WEIR_PEERS_RUNS:-3}"
DIR="${WEIR_PEERS_DIR:-/tmp/weir-peers}"
PY="${WEIR_PEERS_PYTHON:-python3}"
# shellcheck source=scripts/release_weir.sh
source scripts/release_weir.sh
# shellcheck source=scripts/quotes_workload.sh
source scripts/quotes_workload.sh
quotes_workload "$DIR" "$COUNT" "$COUNT"
cat > "$DIR/chdb_query.py" <<'PY'
import sys, chdb
path, proto, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = chdb.query(
    "SELECT base.ticker AS ticker, count(), min(bid_price), max(ask_price), avg(bid_size) "
    f"FROM file('{path}', 'Protobuf') GROUP BY ticker "
    f"SETTINGS format_schema = '{proto}:QuoteNBBO'", "TabSeparated")
rows = [line.split(b"\t") for line in r.bytes().splitlines()]
assert sum(int(x[1]) for x in rows) == count, "chdb did not count every quote"
PY
cat > "$DIR/duckdb_query.py" <<'PY'
import sys, duckdb
path, count = sys.argv[1], int(sys.argv[2])
rows = duckdb.connect().execute(
    "SELECT base.ticker AS ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) "
    "FROM read_ndjson(?) GROUP BY 1", [path]).fetchall()
assert sum(r[1] for r in rows) == count, "DuckDB did not count every quote"
PY
contenders=(weir-protobuf)
[ -n "${WEIR_BIN_BEFORE:-}" ] && contenders+=(before-protobuf)
"$PY" -c 'import chdb' 2>/dev/null && contenders+=(chdb-protobuf)
contenders+=(weir-json)
[ -n "${WEIR_BIN_BEFORE:-}" ] && contenders+=(before-json)
"$PY" -c 'import duckdb' 2>/dev/null && contenders+=(duckdb-json)

declare -A res
for r in $(seq "$RUNS"); do
  for c in "${contenders[@]}"; do
    case $c in
      weir-protobuf) cmd=("$WEIR_BIN" run --quiet "$DIR/protobuf.sql") ;;
      before-protobuf) cmd=("$WEIR_BIN_BEFORE" run --quiet "$DIR/protobuf.sql") ;;
      chdb-protobuf) cmd=("$PY" "$DIR/chdb_query.py" "$PB" "$DIR/descriptors/stocks.proto" "$COUNT") ;;
      weir-json) cmd=("$WEIR_BIN" run --quiet "$DIR/json.sql") ;;
      before-json) cmd=("$WEIR_BIN_BEFORE" run --quiet "$DIR/json.sql") ;;
      duckdb-json) cmd=("$PY" "$DIR/duckdb_query.py" "$JSON" "$COUNT") ;;
    esac
    /usr/bin/time -o "$DIR/time" -f "%e %U %S" "${cmd[@]}" >/dev/null 2>"$DIR/err" \
      || { echo "$c failed:" >&2; cat "$DIR/err" >&2; exit 1; }
    t=$(tail -1 "$DIR/time")
    res[$c]="${res[$c]:-} $(echo "$t" | awk '{ printf "%.2f/%.2f", $1, $2 + $3 }')"
    echo "run $r $c: $t" >&2
  done
done

# "fastest median" of a contender's wall times.
walls() { echo "${res[$1]}" | tr ' ' '\n' | grep . | cut -d/ -f1 | sort -g | awk '{ v[NR] = $1 }
  END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print v[1], m }'; }
echo "date: $(date -u +%Y-%m-%d)  nproc: $(nproc)  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')  quotes: $COUNT ($(du -h "$PB" | cut -f1) protobuf, $(du -h "$JSON" | cut -f1) JSON)"
echo
echo "| contender | runs (wall s / CPU s) | fastest (s) | median (s) |"
echo "|---|---|---|---|"
declare -A best
for c in "${contenders[@]}"; do
  read -r f m < <(walls "$c")
  best[$c]=$f
  echo "| $c |${res[$c]} | $f | $m |"
done
echo
ratio() { awk -v a="${best[$1]}" -v b="${best[$2]}" 'BEGIN { printf "%.2f", a / b }'; }
for w in weir before; do
  [ -n "${best[$w-protobuf]:-}" ] || continue
  line="$w, fastest runs:"
  [ -n "${best[chdb-protobuf]:-}" ] && line="$line chdb / weir on protobuf $(ratio chdb-protobuf "$w-protobuf")x;"
  [ -n "${best[duckdb-json]:-}" ] && line="$line DuckDB / weir on JSON $(ratio duckdb-json "$w-json")x;"
  echo "$line"
done
if [ -n "${best[before-protobuf]:-}" ]; then
  echo "weir / before, fastest runs: protobuf $(ratio weir-protobuf before-protobuf)x, JSON $(ratio weir-json before-json)x"
fi
