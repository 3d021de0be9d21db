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
# A run the object store ended counts as a crash (`counts_as_crash`); any other failure of
# weir ends the test with its output.
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
    counts_as_crash "$status" "run $1" "$WORK/run.log" && return 0
    echo "${CRASH_NAME//-/ } test: weir failed (exit $status) in run $1:" >&2
    cat "$WORK/run.log" >&2
    exit 1
  fi
}

# A run that an object store ended with a server error (HTTP 5xx after the client's own
# retries) stopped as a crash does: a supervisor restarts it and exactly-once must still hold.
# Such a run counts as a crash, at most 3 in a test, and the store's own errors of that moment
# are shown; any other error of weir fails the test.
store_crashes=0
counts_as_crash() {
  local status="$1" what="$2" log="$3"
  grep -q "Server returned non-2xx status code: 5[0-9][0-9]" "$log" || return 1
  [ "$store_crashes" -lt 3 ] || return 1
  store_crashes=$((store_crashes + 1))
  echo "${CRASH_NAME//-/ } test: $what ended (exit $status) on a server error of the object store; counted as a crash, restarting:" >&2
  grep -m 2 "Server returned non-2xx" "$log" | cut -c 1-400 >&2
  if [ -n "${WEIR_OBJECTSTORE_RUN:-}" ] && [ -f "$WEIR_OBJECTSTORE_RUN/weed.log" ]; then
    echo "the object store's last errors:" >&2
    grep '^E' "$WEIR_OBJECTSTORE_RUN/weed.log" | tail -5 | cut -c 1-400 >&2 || true
  fi
  return 0
}

# What the test's last line adds when runs counted as crashes that way.
store_crash_note() {
  [ "$store_crashes" -eq 0 ] || echo " ($store_crashes run(s) ended by a server error of the object store)"
}

# The last run, which reads the topic to its end and stops; restarted after a run that
# `counts_as_crash`.
finish_run() {
  local status
  while :; do
    status=0
    "$WEIR" run --quiet "$WORK/p.sql" >"$WORK/run.log" 2>&1 || status=$?
    cat "$WORK/run.log"
    [ "$status" -eq 0 ] && return 0
    counts_as_crash "$status" "the finishing run" "$WORK/run.log" && continue
    echo "${CRASH_NAME//-/ } test: weir failed (exit $status) in the finishing run" >&2
    exit 1
  done
}
