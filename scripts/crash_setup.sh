# Sourced by the kill -9 tests (scripts/crash_test.sh, scripts/window_crash_test.sh): builds the
# debug weir program (WEIR), makes sure the virtualenv (VENV) has pyarrow, makes a work directory
# (WORK), and uses the broker at WEIR_KAFKA_BOOTSTRAP or starts one with scripts/kafka.sh. On
# exit it kills the weir run in PID if any, stops a broker it started and removes WORK.
# CRASH_NAME names the test in the broker's run directory and its messages; `run_and_kill` is
# the step both tests repeat.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}"
cargo build -p weir --bin weir --locked --quiet
WEIR="$CARGO_TARGET_DIR/debug/weir"
VENV="${WEIR_VENV:-$HOME/.cache/weir-venv}"
if ! "$VENV/bin/python" -c "import pyarrow" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check pyarrow
fi

WORK="$(mktemp -d)"
OWN_BROKER=""
cleanup() {
  [ -n "${PID:-}" ] && kill -9 "$PID" 2>/dev/null || true
  [ -n "$OWN_BROKER" ] && scripts/kafka.sh stop || true
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -z "${WEIR_KAFKA_BOOTSTRAP:-}" ]; then
  export WEIR_KAFKA_RUN="$HOME/.cache/weir-kafka/run-$CRASH_NAME-$$"
  OWN_BROKER=1
  WEIR_KAFKA_BOOTSTRAP="$(scripts/kafka.sh start)"
fi

# Runs `weir run $WORK/p.sql` and kills it with SIGKILL at a random moment from 20 ms to 0.8 s
# into the run (start-up, mid-step, mid-commit), counting the kills that landed on a running
# weir (`landed`) and the runs that ended first (`finished_early`), which the test sets to 0.
# Any other failure of weir ends the test with its output.
run_and_kill() {
  local status=0
  "$WEIR" run --quiet "$WORK/p.sql" >"$WORK/run.log" 2>&1 &
  PID=$!
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", 0.02 + (r % 780) / 1000 }')"
  if kill -9 "$PID" 2>/dev/null; then
    landed=$((landed + 1))
  else
    finished_early=$((finished_early + 1))
  fi
  { wait "$PID"; } 2>/dev/null || status=$?
  PID=""
  # Every run's output, for a failed check to show (the runs' warnings say what was settled).
  { echo "== run $1 (exit $status)"; cat "$WORK/run.log"; } >> "$WORK/runs.log"
  if [ "$status" -ne 0 ] && [ "$status" -ne 137 ]; then
    echo "${CRASH_NAME//-/ } test: weir failed (exit $status) in run $1:" >&2
    cat "$WORK/run.log" >&2
    exit 1
  fi
}
