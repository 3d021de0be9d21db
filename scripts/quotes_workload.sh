# Sourced by the benchmarks that run the README's options-quotes GROUP BY ticker end to end
# (bench_scaling.sh, bench_peers.sh). `quotes_workload DIR PB_COUNT JSON_COUNT` writes, once,
# PB_COUNT quotes as varint-framed protobuf and JSON_COUNT as JSON lines under DIR (their
# schemas, stocks.pb and stocks.proto, in DIR/descriptors), and the query over each as
# DIR/protobuf.sql and DIR/json.sql; the same sources with every row selected (for a copy into
# Parquet, `--output`) as DIR/protobuf_copy.sql and DIR/json_copy.sql. It sets PB and JSON to the
# two data files. Needs WEIR_BIN.
quotes_workload() {
  local dir=$1
  PB="$dir/quotes-$2.pb"
  JSON="$dir/quotes-$3.jsonl"
  mkdir -p "$dir"
  if [ ! -s "$PB" ]; then
    "$WEIR_BIN" gen quotes --count "$2" --out "$PB.tmp" --schema-dir "$dir/descriptors" >&2
    mv "$PB.tmp" "$PB"
  fi
  if [ ! -s "$JSON" ]; then
    "$WEIR_BIN" gen quotes --count "$3" --format json --out "$JSON.tmp" >&2
    mv "$JSON.tmp" "$JSON"
  fi
  local query="SELECT ticker, count(*), min(bid_price), max(ask_price), avg(bid_size) FROM quotes GROUP BY ticker;"
  cat > "$dir/protobuf.sql" <<SQL
CREATE SOURCE quotes (ticker VARCHAR, bid_price DOUBLE, ask_price DOUBLE, bid_size INT UNSIGNED)
WITH ('connector' = 'file', 'path' = '$PB', 'encoding' = 'protobuf',
      'message' = 'stocks.QuoteNBBO', 'location' = '$dir/descriptors/stocks.pb');
$query
SQL
  cat > "$dir/json.sql" <<SQL
CREATE SOURCE quotes (ticker VARCHAR, bid_price DOUBLE, ask_price DOUBLE, bid_size BIGINT)
WITH ('connector' = 'file', 'path' = '$JSON', 'encoding' = 'json', 'framing' = 'lines',
      'fields.ticker' = 'base.ticker');
$query
SQL
  local columns="ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT, bid_price DOUBLE, ask_price DOUBLE"
  cat > "$dir/protobuf_copy.sql" <<SQL
CREATE SOURCE quotes ($columns, bid_size INT UNSIGNED, ask_size INT UNSIGNED)
WITH ('connector' = 'file', 'path' = '$PB', 'encoding' = 'protobuf',
      'message' = 'stocks.QuoteNBBO', 'location' = '$dir/descriptors/stocks.pb');
SELECT * FROM quotes;
SQL
  cat > "$dir/json_copy.sql" <<SQL
CREATE SOURCE quotes ($columns, bid_size BIGINT, ask_size BIGINT)
WITH ('connector' = 'file', 'path' = '$JSON', 'encoding' = 'json', 'framing' = 'lines',
      'fields.ticker' = 'base.ticker', 'fields.timestamp' = 'base.timestamp',
      'fields.sequence_number' = 'base.sequence_number');
SELECT * FROM quotes;
SQL
}
