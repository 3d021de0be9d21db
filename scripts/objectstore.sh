#!/usr/bin/env bash
# A real S3-compatible object store on 127.0.0.1 for weir's tests: SeaweedFS (Apache-2.0), its
# `weed` program built from the Go module proxy and cached under ~/.cache/weir-objectstore, run
# as one `weed server` (master, volume, filer and the S3 gateway) with an S3 identity of its own.
# SeaweedFS answers a conditional put (`If-None-Match: *`) on an existing key with 412, which is
# what makes a Delta log commit on it safe without a lock service.
#
#   scripts/objectstore.sh build          build `weed` once (about 4 minutes on 2 cores)
#   scripts/objectstore.sh start          start it on free loopback ports, wait until S3 answers,
#                                         print `export` lines: WEIR_S3_ENDPOINT, WEIR_S3_ACCESS_KEY,
#                                         WEIR_S3_SECRET_KEY, WEIR_S3_REGION, WEIR_S3_BUCKET
#   scripts/objectstore.sh bucket NAME    create a bucket
#   scripts/objectstore.sh stop           stop the server started by `start` (by its pid)
#
# WEIR_OBJECTSTORE_RUN is the run directory (data, log, pid); the default is under the cache.
set -euo pipefail

VERSION="${WEIR_SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}"
HOME_DIR="${WEIR_OBJECTSTORE_HOME:-$HOME/.cache/weir-objectstore}"
WEED="$HOME_DIR/weed-$VERSION"
RUN="${WEIR_OBJECTSTORE_RUN:-$HOME_DIR/run}"
MODULE="github.com/seaweedfs/seaweedfs"

build() {
    if [[ -x "$WEED" ]]; then return 0; fi
    command -v go >/dev/null || { echo "objectstore.sh: go not found (it builds SeaweedFS)" >&2; exit 1; }
    mkdir -p "$HOME_DIR"
    echo "objectstore.sh: building SeaweedFS $VERSION from the Go module proxy (once, about 4 minutes)" >&2
    # `go install` refuses the module (its go.mod has replace directives), but the refused
    # install leaves the module in the module cache; it is built from a writable copy.
    GOFLAGS=-mod=mod go install "$MODULE/weed@$VERSION" >/dev/null 2>&1 || true
    local src
    src="$(go env GOMODCACHE)/$MODULE@$VERSION"
    [[ -d "$src" ]] || { go mod download -x "$MODULE@$VERSION" >/dev/null 2>&1 || true; }
    [[ -d "$src" ]] || { echo "objectstore.sh: could not download $MODULE@$VERSION" >&2; exit 1; }
    rm -rf "$HOME_DIR/src.tmp"
    cp -r "$src" "$HOME_DIR/src.tmp"
    chmod -R u+w "$HOME_DIR/src.tmp"
    (cd "$HOME_DIR/src.tmp" && GOFLAGS=-mod=mod go build -o "$WEED.tmp" ./weed) >&2
    mv "$WEED.tmp" "$WEED"
    rm -rf "$HOME_DIR/src.tmp"
}

free_port() {
    # weed uses each port + 10000 for gRPC: pick ports whose gRPC twin is free too.
    python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p + 10000 > 65535:
        s.close(); continue
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 10000))
    except OSError:
        s.close(); continue
    t.close(); s.close(); print(p); break
PY
}

running() {
    [[ -f "$RUN/pid" ]] && kill -0 "$(cat "$RUN/pid")" 2>/dev/null
}

start() {
    build
    if running; then
        cat "$RUN/env"
        return 0
    fi
    mkdir -p "$RUN/data"
    # Below its free-space floor SeaweedFS turns every volume read-only and answers writes with
    # 500 "No writable volumes": say so up front instead of leaving tests to fail on it.
    local free_mib
    free_mib="$(df -Pm "$RUN/data" | awk 'NR == 2 {print $4}')"
    if [[ -n "$free_mib" && "$free_mib" -lt 2048 ]]; then
        echo "objectstore.sh: only ${free_mib} MiB free under $RUN/data; the object store needs" \
             "about 2 GiB for the tests and refuses writes when the disk fills" >&2
    fi
    local s3 master volume filer key secret
    s3="$(free_port)"; master="$(free_port)"; volume="$(free_port)"; filer="$(free_port)"
    key="weir$(python3 -c 'import secrets; print(secrets.token_hex(6))')"
    secret="$(python3 -c 'import secrets; print(secrets.token_hex(20))')"
    cat > "$RUN/s3.json" <<JSON
{"identities": [{"name": "weir", "credentials": [{"accessKey": "$key", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
JSON
    # A fixed volume count: the automatic one reserves a whole 64 MiB for every volume not yet
    # full and 1% of the disk, so on a nearly full disk it left too few volumes for the tests.
    # Volumes are not preallocated; 64 of them only bound what the tests may write (4 GiB).
    "$WEED" server -dir="$RUN/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
        -master.port="$master" -volume.port="$volume" -filer.port="$filer" \
        -s3 -s3.port="$s3" -s3.config="$RUN/s3.json" -volume.max=64 \
        -volume.minFreeSpace=512MiB -master.volumeSizeLimitMB=64 >"$RUN/weed.log" 2>&1 &
    echo $! > "$RUN/pid"
    echo "$master" > "$RUN/master-port"
    for _ in $(seq 1 240); do
        # Any HTTP answer from the S3 port (403 without a signature) means it serves.
        if python3 - "$s3" <<'PY' 2>/dev/null
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2)
except urllib.error.HTTPError:
    pass
PY
        then
            cat > "$RUN/env" <<ENV
export WEIR_S3_ENDPOINT=http://127.0.0.1:$s3
export WEIR_S3_ACCESS_KEY=$key
export WEIR_S3_SECRET_KEY=$secret
export WEIR_S3_REGION=us-east-1
ENV
            cat "$RUN/env"
            return 0
        fi
        if ! running; then
            echo "objectstore.sh: weed exited; its log:" >&2
            tail -30 "$RUN/weed.log" >&2
            exit 1
        fi
        sleep 0.25
    done
    echo "objectstore.sh: S3 did not answer within 60 s; its log: $RUN/weed.log" >&2
    stop
    exit 1
}

bucket() {
    running || { echo "objectstore.sh: not running" >&2; exit 1; }
    local name="$1" shell=("$WEED" shell -master="127.0.0.1:$(cat "$RUN/master-port")")
    # The shell needs the master to have a leader and the filer to have registered: retry.
    for _ in $(seq 1 40); do
        echo "s3.bucket.create -name $name" | "${shell[@]}" >/dev/null 2>&1 || true
        if echo "s3.bucket.list" | "${shell[@]}" 2>/dev/null | grep -q "^ *$name[[:space:]]"; then
            return 0
        fi
        sleep 0.5
    done
    echo "objectstore.sh: could not create bucket $name; log: $RUN/weed.log" >&2
    exit 1
}

stop() {
    if [[ -f "$RUN/pid" ]]; then
        local pid
        pid="$(cat "$RUN/pid")"
        if kill -0 "$pid" 2>/dev/null; then
            # weed takes over 10 s to stop on SIGTERM: a few seconds, then SIGKILL.
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 12); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$RUN/pid" "$RUN/env"
    fi
}

case "${1:-}" in
    build) build ;;
    start) start ;;
    bucket) bucket "${2:?bucket name}" ;;
    stop) stop ;;
    status)
        if running; then echo "running (pid $(cat "$RUN/pid"))"; else echo "not running"; fi ;;
    *) echo "usage: $0 build|start|bucket NAME|stop|status" >&2; exit 2 ;;
esac
