# Sourced by the benchmark scripts: sets WEIR_BIN, the weir program they measure, to a release
# build of this tree unless the caller already set it.
if [ -z "${WEIR_BIN:-}" ]; then
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir-release-target}"
  cargo build --release --locked -p weir --bin weir >&2
  WEIR_BIN="$CARGO_TARGET_DIR/release/weir"
fi
