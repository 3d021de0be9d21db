#!/usr/bin/env bash
# The Delta sink against the Parquet step-file sink on the same exactly-once pipeline and data:
# N options quotes (default 20,000,000) from the file connector through a source with
# 'state.dir' and 'dedup.key' into (a) Parquet step files and (b) a Delta table on the local
# object store (the filesystem through object_store), alternating RUNS times (default 3).
# Prints wall time, CPU, peak RSS and rows/s of each run, the ratios of the fastest runs, and the
# Delta commit latency per step (p50/p99; commits that wrote a checkpoint apart), read from the
# sink's debug lines.
#
#   scripts/bench_delta.sh [N] [RUNS] [COMMIT_INTERVAL]
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
"$WEIR" gen quotes --count "$N" --seed 11 --duplicates 0.1 --out "$WORK/q.bin" \
  --schema-dir "$WORK/schema" 2>/dev/null
echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "$N quotes ($(du -h "$WORK/q.bin" | cut -f1)), commit.interval '$INTERVAL', $RUNS runs each, alternating"
pipeline() { # $1: parquet|delta, $2: run
  cat <<SQL
CREATE SOURCE quotes (ticker VARCHAR, timestamp TIMESTAMP, sequence_number BIGINT,
                      bid_price DOUBLE, bid_size INT UNSIGNED, ask_price DOUBLE, ask_size INT UNSIGNED)
  WITH ('connector' = 'file', 'path' = '$WORK/q.bin', 'encoding' = 'protobuf',
        'message' = 'stocks.QuoteNBBO', 'location' = '$WORK/schema/stocks.pb',
        'state.dir' = '$WORK/state-$1-$2', 'dedup.key' = 'ticker,sequence_number',
        'commit.interval' = '$INTERVAL');
SQL
  if [ "$1" = delta ]; then
    echo "CREATE SINK out FROM quotes WITH ('connector' = 'delta', 'path' = '$WORK/out-$1-$2', 'compression' = 'zstd');"
  else
    echo "CREATE SINK out FROM quotes WITH ('connector' = 'parquet', 'path' = '$WORK/out-$1-$2');"
  fi
}
printf "%-8s %4s %9s %9s %10s %12s\n" sink run wall_s cpu_s rss_mib rows_per_s
for r in $(seq 1 "$RUNS"); do
  for kind in parquet delta; do
    pipeline "$kind" "$r" > "$WORK/$kind.sql"
    /usr/bin/time -f "%e %U %S %M" -o "$WORK/time" env RUST_LOG=weir::sink::delta=debug \
      "$WEIR" run --quiet --log-format json "$WORK/$kind.sql" 2> "$WORK/log-$kind-$r" >/dev/null
    read -r wall user sys rss < "$WORK/time"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
    printf "%-8s %4s %9s %9s %10s %12s\n" "$kind" "$r" "$wall" "$cpu" "$((rss / 1024))" \
      "$(awk -v n="$N" -v w="$wall" 'BEGIN { printf "%.0f", n / w }')"
    echo "$kind $wall $cpu $rss" >> "$WORK/results"
    rm -rf "$WORK/out-$kind-$r" "$WORK/state-$kind-$r"
  done
done
python3 - "$WORK" "$RUNS" <<'PY'
import glob, json, sys
work, runs = sys.argv[1], int(sys.argv[2])
res = {}
for line in open(f"{work}/results"):
    k, wall, cpu, rss = line.split()
    res.setdefault(k, []).append((float(wall), float(cpu), int(rss)))
p, d = res["parquet"], res["delta"]
best = lambda rows, i: min(r[i] for r in rows)
print(f"throughput delta/parquet (fastest wall): {best(p, 0) / best(d, 0):.3f}x; "
      f"CPU delta/parquet (least): {best(d, 1) / best(p, 1):.3f}x; "
      f"peak RSS delta/parquet (largest): {max(r[2] for r in d) / max(r[2] for r in p):.3f}x")
plain, with_checkpoint = [], []
for f in glob.glob(f"{work}/log-delta-*"):
    for line in open(f):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        fields = e.get("fields", {})
        if e.get("message") == "Delta commit":
            us, version = int(str(fields["micros"])), int(str(fields["version"]))
            (with_checkpoint if version % 10 == 0 else plain).append(us)
def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000 if xs else float("nan")
print(f"Delta commit per step: {len(plain)} commits p50 {pct(plain, .5):.1f} ms, p99 {pct(plain, .99):.1f} ms; "
      f"{len(with_checkpoint)} commits that wrote a checkpoint p50 {pct(with_checkpoint, .5):.1f} ms")
PY
