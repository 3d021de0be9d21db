# Sourced by scripts/test.sh and scripts/demo.sh: system packages the build needs.

# RocksDB (weir-dedup, linked into the weir program) is built from C++ by librocksdb-sys, whose
# bindgen needs libclang: install Debian's libclang-dev when no libclang is found.
ensure_libclang() {
  # libclang.so or libclang-N.so only: libclang-cpp.so (another package, often installed
  # alone) is not what bindgen loads.
  if [ -n "${LIBCLANG_PATH:-}" ] || compgen -G "/usr/lib/llvm-*/lib/libclang.so*" >/dev/null \
    || compgen -G "/usr/lib/*/libclang-[0-9]*.so*" >/dev/null; then
    return 0
  fi
  echo "== apt-get install libclang-dev (for RocksDB's bindings)" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q libclang-dev >/dev/null \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q libclang-dev >/dev/null; } \
    || { echo "cannot install libclang-dev; install it (or set LIBCLANG_PATH) and retry" >&2; return 1; }
}
