# Sourced by the benchmark scripts that time each run with `/usr/bin/time -f "%e %U %S"` and
# keep the triples per mode in the associative array `res`. `runs_row MODE` prints MODE's
# Markdown row for COUNT messages (the runs as wall s / CPU s, the best messages/s, the least
# CPU µs a message) and sets `best_MODE` (the least wall seconds) and `cpu_MODE` (the least CPU
# seconds), with MODE's dashes as underscores.
runs_row() {
  local mode=$1 cells="" best=999999 cpu=999999
  # shellcheck disable=SC2086
  set -- ${res[$mode]}
  while [ $# -ge 3 ]; do
    cells="$cells $(awk -v e="$1" -v u="$2" -v s="$3" 'BEGIN { printf "%.2f/%.2f", e, u + s }')"
    best=$(awk -v a="$best" -v b="$1" 'BEGIN { print (b < a) ? b : a }')
    cpu=$(awk -v a="$cpu" -v u="$2" -v s="$3" 'BEGIN { c = u + s; print (c < a) ? c : a }')
    shift 3
  done
  eval "best_${mode//-/_}=$best; cpu_${mode//-/_}=$cpu"
  echo "| $mode |$cells | $(awk -v n="$COUNT" -v t="$best" 'BEGIN { printf "%.0f", n / t }') | $(awk -v n="$COUNT" -v c="$cpu" 'BEGIN { printf "%.2f", c * 1e6 / n }') |"
}
