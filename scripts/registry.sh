#!/usr/bin/env bash
# A real Confluent-compatible schema registry on 127.0.0.1 for weir's tests: Apicurio Registry
# 3.0.9 (its ready-to-run distribution from Maven Central; in-memory storage; runs on Java 17),
# whose Confluent API is under /apis/ccompat/v7.
#
#   scripts/registry.sh fetch    fetch (with Maven) and unpack the distribution, once, into
#                                ~/.cache/weir-registry
#   scripts/registry.sh start    start it on a free loopback port, wait until it answers, print its
#                                Confluent-compatible URL (also written to $WEIR_REGISTRY_RUN/url)
#   scripts/registry.sh stop     stop the JVM started by `start` (by its pid)
#   scripts/registry.sh status   say whether it runs and where
#
# With WEIR_REGISTRY_TLS_CERT and WEIR_REGISTRY_TLS_KEY (PEM files: a server certificate for
# 127.0.0.1 and its key), the same JVM also serves HTTPS on a third free loopback port; its URL is
# written to $WEIR_REGISTRY_RUN/https-url. (This build fixes client authentication to none at
# build time, so it cannot require client certificates.)
#
# Apicurio's management interface (health, metrics) is bound to loopback too, on a second free
# port (it would listen on 0.0.0.0:9000 by default). Its default compatibility rule is NONE
# (Confluent's is BACKWARD). Known differences from Confluent's server: `format=serialized` and
# the compatibility endpoint for protobuf schemas with references do not work; weir uses neither.
set -euo pipefail

VERSION="${WEIR_REGISTRY_VERSION:-3.0.9}"
HOME_DIR="${WEIR_REGISTRY_HOME:-$HOME/.cache/weir-registry}"
DIST="$HOME_DIR/apicurio-registry-$VERSION"
RUN="${WEIR_REGISTRY_RUN:-$HOME_DIR/run}"
HEAP="${WEIR_REGISTRY_HEAP:--Xmx256m}"

fetch() {
    if [[ -f "$DIST/.complete" ]]; then return 0; fi
    command -v mvn >/dev/null || { echo "registry.sh: mvn not found (Maven fetches the registry)" >&2; exit 1; }
    local artifact="io.apicurio:apicurio-registry-app:$VERSION:tar.gz:all"
    local tgz="$HOME_DIR/apicurio-registry-app-$VERSION-all.tar.gz"
    mkdir -p "$HOME_DIR"
    if [[ ! -f "$tgz" ]]; then
        echo "registry.sh: fetching $artifact with Maven (about 110 MB, once)" >&2
        # 3.0.9's parent pom is not on Maven Central: dependency-plugin 2.8 fetches the artifact
        # without resolving it (newer versions insist on the parent).
        mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:2.8:get \
            -Dtransitive=false -Dartifact="$artifact" -Ddest="$tgz.tmp" >&2
        mv "$tgz.tmp" "$tgz"
    fi
    rm -rf "$DIST.tmp"
    mkdir -p "$DIST.tmp"
    tar -xzf "$tgz" -C "$DIST.tmp"
    # The runnable jar: quarkus-run.jar (fast-jar layout) or *-runner.jar with lib/ (3.0.x).
    local jar
    jar="$(cd "$DIST.tmp" && find . -name quarkus-run.jar -o -name '*-runner.jar' | head -1)"
    [[ -n "$jar" ]] || { echo "registry.sh: no runnable jar in $tgz" >&2; exit 1; }
    echo "$jar" > "$DIST.tmp/.jar"
    touch "$DIST.tmp/.complete"
    rm -rf "$DIST"
    mv "$DIST.tmp" "$DIST"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

running() {
    [[ -f "$RUN/pid" ]] && kill -0 "$(cat "$RUN/pid")" 2>/dev/null
}

start() {
    command -v java >/dev/null || { echo "registry.sh: java not found (Java 17+ runs the registry)" >&2; exit 1; }
    fetch
    if running; then
        cat "$RUN/url"
        return 0
    fi
    mkdir -p "$RUN"
    local port mport jar tls=()
    port="$(free_port)"
    mport="$(free_port)"
    jar="$(cat "$DIST/.jar")"
    rm -f "$RUN/https-url"
    if [[ -n "${WEIR_REGISTRY_TLS_CERT:-}" && -n "${WEIR_REGISTRY_TLS_KEY:-}" ]]; then
        local sport
        sport="$(free_port)"
        tls=(-Dquarkus.http.ssl-port="$sport"
             -Dquarkus.http.ssl.certificate.files="$WEIR_REGISTRY_TLS_CERT"
             -Dquarkus.http.ssl.certificate.key-files="$WEIR_REGISTRY_TLS_KEY")
        echo "https://127.0.0.1:$sport/apis/ccompat/v7" > "$RUN/https-url.pending"
    fi
    (cd "$DIST/$(dirname "$jar")" && exec java $HEAP -XX:+UseSerialGC \
        -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
        -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mport" \
        "${tls[@]}" -jar "$(basename "$jar")" >"$RUN/registry.log" 2>&1) &
    echo $! > "$RUN/pid"
    local url="http://127.0.0.1:$port/apis/ccompat/v7"
    for _ in $(seq 1 240); do
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
            "$url/subjects" >/dev/null 2>&1; then
            echo "$url" > "$RUN/url"
            if [[ -f "$RUN/https-url.pending" ]]; then mv "$RUN/https-url.pending" "$RUN/https-url"; fi
            echo "$url"
            return 0
        fi
        if ! running; then
            echo "registry.sh: the registry exited; its log:" >&2
            tail -30 "$RUN/registry.log" >&2
            exit 1
        fi
        sleep 0.25
    done
    echo "registry.sh: the registry did not answer within 60 s; its log: $RUN/registry.log" >&2
    stop
    exit 1
}

stop() {
    if [[ -f "$RUN/pid" ]]; then
        local pid
        pid="$(cat "$RUN/pid")"
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$RUN/pid" "$RUN/url" "$RUN/https-url"
    fi
}

case "${1:-}" in
    fetch) fetch ;;
    start) start ;;
    stop) stop ;;
    status)
        if running; then echo "running (pid $(cat "$RUN/pid")) at $(cat "$RUN/url" 2>/dev/null)"; else echo "not running"; fi ;;
    *) echo "usage: $0 fetch|start|stop|status" >&2; exit 2 ;;
esac
