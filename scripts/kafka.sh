#!/usr/bin/env bash
# A real single-node Kafka (KRaft, broker and controller in one JVM) on 127.0.0.1 for weir's tests
# and benchmarks.
#
#   scripts/kafka.sh fetch    resolve Apache Kafka's jars from Maven Central (cached)
#   scripts/kafka.sh start    format fresh storage in a temporary directory, start, wait until ready
#   scripts/kafka.sh stop     stop the broker started by `start` (by its pid) and delete its storage
#   scripts/kafka.sh restart  stop the JVM and start it again on the same storage and port
#   scripts/kafka.sh status   say whether it runs and where
#   scripts/kafka.sh classpath  print the classpath (for the Java producer/consumer tools)
#
# The bootstrap address (127.0.0.1:PORT, a free port chosen at start) is written to
# $WEIR_KAFKA_RUN/bootstrap (default ~/.cache/weir-kafka/run); the tests read it from
# WEIR_KAFKA_BOOTSTRAP. Another WEIR_KAFKA_RUN directory runs a second, independent broker
# (the restart test does that so it does not disturb the others).
set -euo pipefail

KAFKA_VERSION="${WEIR_KAFKA_VERSION:-4.3.1}"
HOME_DIR="${WEIR_KAFKA_HOME:-$HOME/.cache/weir-kafka}"
LIB="$HOME_DIR/lib-$KAFKA_VERSION"
RUN="${WEIR_KAFKA_RUN:-$HOME_DIR/run}"
HEAP="${WEIR_KAFKA_HEAP:--Xmx512m}"

fetch() {
    if [[ -f "$LIB/.complete" ]]; then return 0; fi
    command -v mvn >/dev/null || { echo "kafka.sh: mvn not found (Maven is needed to fetch Kafka)" >&2; exit 1; }
    mkdir -p "$HOME_DIR/pom"
    # A throwaway project whose only job is to let Maven resolve Kafka and its dependencies.
    cat > "$HOME_DIR/pom/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>weir</groupId><artifactId>weir-kafka-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
    rm -rf "$LIB.tmp"
    echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION with Maven into $LIB" >&2
    mvn -q -B -f "$HOME_DIR/pom/pom.xml" dependency:copy-dependencies \
        -DoutputDirectory="$LIB.tmp" -DincludeScope=runtime >&2
    touch "$LIB.tmp/.complete"
    rm -rf "$LIB"
    mv "$LIB.tmp" "$LIB"
}

classpath() { echo "$LIB/*"; }

running() {
    [[ -f "$RUN/pid" ]] && kill -0 "$(cat "$RUN/pid")" 2>/dev/null
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
    fetch
    if running; then
        echo "kafka.sh: already running (pid $(cat "$RUN/pid")) at $(cat "$RUN/bootstrap")" >&2
        cat "$RUN/bootstrap"
        return 0
    fi
    mkdir -p "$RUN"
    local data port cport
    data="$(mktemp -d "${TMPDIR:-/tmp}/weir-kafka.XXXXXX")"
    port="$(free_port)"
    cport="$(free_port)"
    while [[ "$cport" == "$port" ]]; do cport="$(free_port)"; done
    cat > "$data/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.segment.bytes=268435456
PROPS
    cat > "$data/log4j2.properties" <<LOG
rootLogger.level=WARN
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$data/server.log
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%d] %p %m (%c)%n
LOG
    local cp; cp="$(classpath)"
    java -cp "$cp" -Dlog4j2.configurationFile="$data/log4j2.properties" kafka.tools.StorageTool \
        format -t "$(java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)" \
        -c "$data/server.properties" >"$data/format.log" 2>&1 \
        || { cat "$data/format.log" >&2; echo "kafka.sh: storage format failed" >&2; rm -rf "$data"; exit 1; }
    echo "$data" > "$RUN/data"
    echo "127.0.0.1:$port" > "$RUN/bootstrap"
    launch
}

# Starts the JVM on the storage in $RUN/data and waits until it accepts connections.
launch() {
    local data port cp
    data="$(cat "$RUN/data")"
    port="$(cut -d: -f2 < "$RUN/bootstrap")"
    cp="$(classpath)"
    # The JVM is started on its own line so that $! is the JVM's pid and `stop` can end it by pid.
    java $HEAP -Xms128m -XX:+UseG1GC -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$data/log4j2.properties" \
        -cp "$cp" kafka.Kafka "$data/server.properties" >>"$data/stdout.log" 2>&1 &
    local pid=$!
    echo "$pid" > "$RUN/pid"
    # Ready once the broker port accepts connections.
    local i
    for i in $(seq 1 120); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "kafka.sh: the broker exited during start-up; its logs:" >&2
            tail -50 "$data/stdout.log" "$data/server.log" >&2 || true
            rm -f "$RUN/pid"
            exit 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            # The port opens a little before the broker is unfenced; give metadata a moment.
            sleep 1
            echo "kafka.sh: Kafka $KAFKA_VERSION running (pid $pid) at 127.0.0.1:$port" >&2
            echo "127.0.0.1:$port"
            return 0
        fi
        sleep 0.5
    done
    echo "kafka.sh: the broker did not accept connections within 60 s" >&2
    stop
    exit 1
}

# Ends the JVM (SIGTERM: a clean shutdown; SIGKILL if it takes over 15 s) and keeps storage.
stop_jvm() {
    if [[ -f "$RUN/pid" ]]; then
        local pid; pid="$(cat "$RUN/pid")"
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$RUN/pid"
    fi
}

restart() {
    [[ -f "$RUN/data" && -f "$RUN/bootstrap" ]] || { echo "kafka.sh: nothing to restart" >&2; exit 1; }
    stop_jvm
    launch
}

stop() {
    stop_jvm
    if [[ -f "$RUN/data" ]]; then
        local data; data="$(cat "$RUN/data")"
        # Only ever delete the directory this script created.
        case "$data" in */weir-kafka.*) rm -rf "$data" ;; esac
        rm -f "$RUN/data"
    fi
    rm -f "$RUN/bootstrap"
}

status() {
    if running; then
        echo "running (pid $(cat "$RUN/pid")) at $(cat "$RUN/bootstrap")"
    else
        echo "not running"
        return 1
    fi
}

case "${1:-}" in
    fetch) fetch ;;
    start) start ;;
    stop) stop ;;
    restart) restart ;;
    status) status ;;
    classpath) fetch; classpath ;;
    *) echo "usage: $0 fetch|start|stop|restart|status|classpath" >&2; exit 2 ;;
esac
