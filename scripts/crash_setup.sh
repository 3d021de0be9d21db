# Sourced by the kill -9 tests (scripts/crash_test.sh, scripts/window_crash_test.sh): builds the
# debug weir program (WEIR), makes sure the virtualenv (VENV) has pyarrow, makes a work directory
# (WORK), and uses the broker at WEIR_KAFKA_BOOTSTRAP or starts one with scripts/kafka.sh. On
# exit it kills the weir run in PID if any, stops a broker it started and removes WORK.
# CRASH_NAME names the test in the broker's run directory.
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
