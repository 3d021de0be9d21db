#!/usr/bin/env bash
# A Prometheus server on 127.0.0.1 for weir's metrics test: it scrapes the targets the test
# writes into a directory (file-based discovery), every second.
#
#   scripts/prometheus.sh start   install Debian's `prometheus` package when it is missing (as
#                                 root or with password-less sudo), write a config and storage in
#                                 $WEIR_PROMETHEUS_RUN (default ~/.cache/weir-prometheus/run), start
#                                 it on a free loopback port, wait until it is ready, and print
#                                 `export` lines: WEIR_PROMETHEUS_URL (http://127.0.0.1:PORT) and
#                                 WEIR_PROMETHEUS_TARGETS (the directory for *.json target files)
#   scripts/prometheus.sh stop    stop it (by its pid) and delete its run directory
#
# Without the package and without a way to install it, `start` prints a NOTICE and exits 3 (the
# test then skips its Prometheus part); with CI set, that is an error (exit 1) instead.
set -euo pipefail

RUN="${WEIR_PROMETHEUS_RUN:-$HOME/.cache/weir-prometheus/run}"

install() {
    command -v prometheus >/dev/null && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi
    fi
    if [ "$sudo" != none ] && command -v apt-get >/dev/null; then
        echo "prometheus.sh: installing Debian's prometheus package" >&2
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2 \
            || { $sudo apt-get update >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >&2; }
    fi
    command -v prometheus >/dev/null && return 0
    if [ -n "${CI:-}" ]; then
        echo "prometheus.sh: prometheus is not installed and apt-get cannot install it (root or password-less sudo needed)" >&2
        exit 1
    fi
    echo "NOTICE: prometheus is not installed and cannot be installed here (apt-get as root); the metrics test skips its Prometheus part" >&2
    exit 3
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    install
    if [ -f "$RUN/pid" ] && kill -0 "$(cat "$RUN/pid")" 2>/dev/null; then
        echo "prometheus.sh: already running (pid $(cat "$RUN/pid")); stop it first" >&2
        exit 1
    fi
    rm -rf "$RUN"
    mkdir -p "$RUN/targets" "$RUN/data"
    cat > "$RUN/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: weir
    file_sd_configs:
      - files: ['$RUN/targets/*.json']
        refresh_interval: 1s
YML
    local port
    port=$(free_port)
    # setsid: its own session, so a Ctrl-C meant for the test command does not reach it first.
    setsid prometheus --config.file="$RUN/prometheus.yml" --storage.tsdb.path="$RUN/data" \
        --web.listen-address="127.0.0.1:$port" --log.level=warn >"$RUN/prometheus.log" 2>&1 &
    echo $! >"$RUN/pid"
    echo "http://127.0.0.1:$port" >"$RUN/url"
    for _ in $(seq 120); do
        if curl -fs "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1; then
            echo "export WEIR_PROMETHEUS_URL=http://127.0.0.1:$port"
            echo "export WEIR_PROMETHEUS_TARGETS=$RUN/targets"
            return 0
        fi
        if ! kill -0 "$(cat "$RUN/pid")" 2>/dev/null; then
            echo "prometheus.sh: prometheus exited; its log:" >&2
            cat "$RUN/prometheus.log" >&2
            exit 1
        fi
        sleep 0.5
    done
    echo "prometheus.sh: prometheus did not become ready within 60 s; its log:" >&2
    cat "$RUN/prometheus.log" >&2
    stop
    exit 1
}

stop() {
    if [ -f "$RUN/pid" ]; then
        local pid
        pid=$(cat "$RUN/pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -9 "$pid" 2>/dev/null || true
        fi
    fi
    rm -rf "$RUN"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: scripts/prometheus.sh start|stop" >&2; exit 2 ;;
esac
