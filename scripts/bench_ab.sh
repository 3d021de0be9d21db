#!/usr/bin/env bash
# A against B: the same pipeline run by two weir programs (say, the build of an earlier commit
# and this one), alternating A, B, A, B, ... so that the machine's noise falls on both alike.
# Prints each program's fastest and median wall time, its median CPU time (user + system), its
# peak RSS, and B's times over A's.
#
#   scripts/bench_ab.sh A_WEIR B_WEIR PIPELINE.sql [RUNS]      (RUNS default 5)
#
# WEIR_AB_BEFORE, a shell command, runs before each run (untimed): for a pipeline with
# 'state.dir', remove the state and the output so every run starts from nothing.
# WEIR_AB_ARGS: more arguments for `weir run` (say, `--partitions 2`).
#
# Build an earlier commit's program with, for example:
#   git worktree add /tmp/base COMMIT && CARGO_TARGET_DIR=... cargo build --release -p weir
set -euo pipefail
A="$1" B="$2" SQL="$3" RUNS="${4:-5}"
declare -A times cpu rss
for _ in $(seq "$RUNS"); do
  for side in A B; do
    bin=${!side}
    if [ -n "${WEIR_AB_BEFORE:-}" ]; then bash -c "$WEIR_AB_BEFORE"; fi
    # shellcheck disable=SC2086 # WEIR_AB_ARGS is split into arguments on purpose
    out=$( { /usr/bin/time -f "TIME %e %M %U %S" "$bin" run --quiet ${WEIR_AB_ARGS:-} "$SQL" >/dev/null; } 2>&1 ) \
      || { echo "$side ($bin) failed: $out" >&2; exit 1; }
    read -r s k c < <(echo "$out" | awk '/^TIME/ {print $2, $3, $4 + $5}')
    times[$side]="${times[$side]:-} $s"
    cpu[$side]="${cpu[$side]:-} $c"
    if [ "$k" -gt "${rss[$side]:-0}" ]; then rss[$side]=$k; fi
  done
done
stat() { # fastest median
  echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s\n", v[1], m }'
}
read -r fa ma < <(stat "${times[A]}")
read -r fb mb < <(stat "${times[B]}")
read -r _ ca < <(stat "${cpu[A]}")
read -r _ cb < <(stat "${cpu[B]}")
echo "| program | fastest (s) | median (s) | median CPU (s) | peak RSS (MiB) |"
echo "|---|---|---|---|---|"
echo "| A: $A | $fa | $ma | $ca | $(( ${rss[A]} / 1024 )) |"
echo "| B: $B | $fb | $mb | $cb | $(( ${rss[B]} / 1024 )) |"
awk -v fa="$fa" -v fb="$fb" -v ma="$ma" -v mb="$mb" -v ca="$ca" -v cb="$cb" 'BEGIN {
  printf "\nB / A: fastest %.3f, median %.3f, CPU %.3f (below 1: B is faster)\n", fb / fa, mb / ma, cb / ca }'
