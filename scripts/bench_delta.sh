#!/usr/bin/env bash
# The Delta sink against the Parquet step-file sink on the same exactly-once pipeline and data:
# N options quotes (default 20,000,000) from the file connector through a source with
# 'state.dir' and 'dedup.key' into
#   parquet     Parquet step files on the local disk (the reference),
#   delta       a Delta table on the local disk (the filesystem through object_store),
#   delta-one   the same with one thread writing its data files ('sink.parallelism' = '1'), and
#   delta-two   with up to two ('sink.parallelism' = '2'), when WEIR_BENCH_KINDS names them,
#   delta-s3    a Delta table on the S3-compatible store on loopback,
#   parquet-s3  Parquet step files uploaded to that store,
# the last two when WEIR_S3_ENDPOINT is set (scripts/objectstore.sh start prints it; keys in
# WEIR_S3_ACCESS_KEY/WEIR_S3_SECRET_KEY, bucket WEIR_S3_BUCKET), alternating RUNS times
# (default 3). The store runs on the same cores as weir. Prints wall time, CPU (weir's), peak
# RSS and rows/s of each run, each kind's ratios to `parquet` (fastest runs; largest RSS), and
# the Delta commit latency per step (p50/p99; the commits that wrote a checkpoint apart), read
# from the sink's debug lines.
#
#   scripts/bench_delta.sh [N] [RUNS] [COMMIT_INTERVAL]
#
# WEIR_BENCH_KINDS picks the sinks (`parquet` always runs: it is the reference). With
# WEIR_BIN_BEFORE set, a kind written `KIND:before` runs that other build of weir, in the same
# alternation (an A/B of a change: WEIR_BENCH_KINDS="delta-s3 delta-s3:before").
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-20000000}"
RUNS="${2:-3}"
INTERVAL="${3:-1000000 rows}"
# WEIR_BIN: a weir program to measure instead of building the release one (a dry run of the
# script with a debug build, for example).
if [ -n "${WEIR_BIN:-}" ]; then
  WEIR="$WEIR_BIN"
else
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-release-target}"
  cargo build --release --locked -p weir --bin weir >&2
  WEIR="$CARGO_TARGET_DIR/release/weir"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
KINDS="parquet delta"
if [ -n "${WEIR_S3_ENDPOINT:-}" ]; then
  KINDS="$KINDS delta-s3 parquet-s3"
fi
if [ -n "${WEIR_BENCH_KINDS:-}" ]; then
  KINDS="parquet ${WEIR_BENCH_KINDS/parquet/}"
fi
"$WEIR" gen quotes --count "$N" --seed 11 --duplicates 0.1 --out "$WORK/q.bin" \
  --schema-dir "$WORK/schema" 2>/dev/null
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "$N quotes ($(du -h "$WORK/q.bin" | cut -f1)), commit.interval '$INTERVAL', $RUNS runs each, alternating: $KINDS"
S3="'s3.endpoint' = '${WEIR_S3_ENDPOINT:-}', 's3.region' = 'us-east-1', 's3.access.key.id' = '${WEIR_S3_ACCESS_KEY:-}', 's3.secret.access.key' = '\${env:WEIR_S3_SECRET_KEY}'"
BUCKET="${WEIR_S3_BUCKET:-}"
pipeline() { # $1: kind, $2: run
  cat <<SQL
CREATE SOURCE quotes (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT,
                      bid_price DOUBLE, bid_size INT UNSIGNED, ask_price DOUBLE, ask_size INT UNSIGNED)
  WITH ('connector' = 'file', 'path' = '$WORK/q.bin', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb',
        'state.dir' = '$WORK/state-$1-$2', 'dedup.key' = 'ticker,sequence_number',
        'commit.interval' = '$INTERVAL');
SQL
  case "$1" in
    parquet) echo "CREATE SINK out FROM quotes WITH ('connector' = 'parquet', 'path' = '$WORK/out-$1-$2');" ;;
    delta) echo "CREATE SINK out FROM quotes WITH ('connector' = 'delta', 'path' = '$WORK/out-$1-$2', 'compression' = 'zstd');" ;;
    delta-one) echo "CREATE SINK out FROM quotes WITH ('connector' = 'delta', 'path' = '$WORK/out-$1-$2', 'compression' = 'zstd', 'sink.parallelism' = '1');" ;;
    delta-two) echo "CREATE SINK out FROM quotes WITH ('connector' = 'delta', 'path' = '$WORK/out-$1-$2', 'compression' = 'zstd', 'sink.parallelism' = '2');" ;;
    delta-s3) echo "CREATE SINK out FROM quotes WITH ('connector' = 'delta', 'path' = 's3://$BUCKET/bench-$$-$1-$2', 'compression' = 'zstd', $S3);" ;;
    parquet-s3) echo "CREATE SINK out FROM quotes WITH ('connector' = 'parquet', 'path' = 's3://$BUCKET/bench-$$-$1-$2', $S3);" ;;
  esac
}
printf "%-10s %4s %9s %9s %10s %12s\n" sink run wall_s cpu_s rss_mib rows_per_s
for r in $(seq 1 "$RUNS"); do
  for kind in $KINDS; do
    bin="$WEIR" tag="$r"
    case "$kind" in *:before) bin="${WEIR_BIN_BEFORE:?a kind KIND:before needs WEIR_BIN_BEFORE}" tag="${r}b" ;; esac
    pipeline "${kind%:before}" "$tag" > "$WORK/$kind.sql"
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/time" env RUST_LOG=weir::sink::delta=debug \
      "$bin" run --quiet --log-format json "$WORK/$kind.sql" 2> "$WORK/log-$kind-$r" >/dev/null \
      || { echo "bench_delta.sh: weir failed on $kind run $r:" >&2; grep -v "Delta commit" "$WORK/log-$kind-$r" | tail -5 >&2; exit 1; }
    read -r wall user sys rss < "$WORK/time"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
    printf "%-10s %4s %9s %9s %10s %12s\n" "$kind" "$r" "$wall" "$cpu" "$((rss / 1024))" \
      "$(awk -v n="$N" -v w="$wall" 'BEGIN { printf "%.0f", n / w }')"
    echo "$kind $wall $cpu $rss" >> "$WORK/results"
    rm -rf "$WORK/out-${kind%:before}-$tag" "$WORK/state-${kind%:before}-$tag"
  done
done
python3 - "$WORK" <<'PY'
import glob, json, sys
work = sys.argv[1]
res = {}
for line in open(f"{work}/results"):
    k, wall, cpu, rss = line.split()
    res.setdefault(k, []).append((float(wall), float(cpu), int(rss)))
p = res["parquet"]
best = lambda rows, i: min(r[i] for r in rows)
for k, rows in res.items():
    if k == "parquet":
        continue
    print(f"{k}/parquet: throughput (fastest wall) {best(p, 0) / best(rows, 0):.3f}x, "
          f"CPU (least) {best(rows, 1) / best(p, 1):.3f}x, "
          f"peak RSS (largest) {max(r[2] for r in rows) / max(r[2] for r in p):.3f}x")
for kind in [k for k in res if k.startswith("delta")]:
    plain, with_checkpoint, writers = [], [], [1]
    for f in glob.glob(f"{work}/log-{kind}-[0-9]*"):
        for line in open(f):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            fields = e.get("fields", {})
            if "another thread writes them" in str(e.get("message", "")):
                writers.append(int(str(fields.get("writers", 1))))
            if e.get("message") == "Delta commit":
                us, version = int(str(fields["micros"])), int(str(fields["version"]))
                (with_checkpoint if version % 10 == 0 else plain).append(us)
    print(f"{kind}: at most {max(writers)} threads wrote data files")
    if not plain:
        continue
    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000 if xs else float("nan")
    print(f"{kind}: commit per step: {len(plain)} commits p50 {pct(plain, .5):.1f} ms, "
          f"p99 {pct(plain, .99):.1f} ms; {len(with_checkpoint)} commits that wrote a checkpoint "
          f"p50 {pct(with_checkpoint, .5):.1f} ms, max {max(with_checkpoint, default=0) / 1000:.1f} ms")
PY
