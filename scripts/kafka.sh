#!/usr/bin/env bash
# A real single-node Kafka (KRaft, broker and controller in one JVM) on 127.0.0.1 for weir's tests
# and benchmarks.
#
#   scripts/kafka.sh fetch    resolve Apache Kafka's jars from Maven Central (cached)
#   scripts/kafka.sh start [--secure]
#                             format fresh storage in a temporary directory, start, wait until ready;
#                             --secure (or WEIR_KAFKA_SECURE=1) adds TLS and SASL listeners to the
#                             same JVM (see below)
#   scripts/kafka.sh env      print the secure listeners' settings as `export NAME=VALUE` lines
#   scripts/kafka.sh stop     stop the broker started by `start` (by its pid) and delete its storage
#   scripts/kafka.sh restart  stop the JVM and start it again on the same storage and port
#   scripts/kafka.sh status   say whether it runs and where
#   scripts/kafka.sh classpath  print the classpath (for the Java producer/consumer tools)
#
# The bootstrap address (127.0.0.1:PORT, a free port chosen at start) is written to
# $WEIR_KAFKA_RUN/bootstrap (default ~/.cache/weir-kafka/run); the tests read it from
# WEIR_KAFKA_BOOTSTRAP. Another WEIR_KAFKA_RUN directory runs a second, independent broker
# (the restart test does that so it does not disturb the others).
#
# Secure mode: a throwaway CA signs a broker certificate (SAN 127.0.0.1 and localhost) and a client
# certificate, made with openssl in $WEIR_KAFKA_RUN/secure; the one JVM then also listens on
#   SSL             TLS
#   MTLS            TLS, client certificate required
#   SASL_PLAINTEXT  SASL over TCP: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
#   SASL_SSL        SASL over TLS: the same mechanisms
#   REAUTH          SASL over TCP with connections.max.reauth.ms=$WEIR_KAFKA_REAUTH_MS (default
#                   4000): SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (not PLAIN)
#   SSL_EXPIRED     TLS with an expired certificate
#   SSL_WRONG_HOST  TLS with a certificate for wrong-host.invalid only
#   SSL_TLS12       TLS 1.2 only (weir must negotiate TLS 1.2 there)
# The user weir/weir-secret exists for PLAIN (JAAS) and both SCRAM hashes (added to the storage at
# format time); OAUTHBEARER takes unsecured JWTs (Kafka's default validator). Every address and
# file is written to $WEIR_KAFKA_RUN/secure.env as `export WEIR_KAFKA_...=...` lines (`env` prints
# them): WEIR_KAFKA_SSL, WEIR_KAFKA_MTLS, WEIR_KAFKA_SASL_PLAINTEXT, WEIR_KAFKA_SASL_SSL,
# WEIR_KAFKA_REAUTH, WEIR_KAFKA_REAUTH_MS, WEIR_KAFKA_SSL_EXPIRED, WEIR_KAFKA_SSL_WRONG_HOST,
# WEIR_KAFKA_SSL_TLS12,
# WEIR_KAFKA_CA, WEIR_KAFKA_OTHER_CA, WEIR_KAFKA_CLIENT_CERT, WEIR_KAFKA_CLIENT_KEY,
# WEIR_KAFKA_CLIENT_KEY_ENCRYPTED, WEIR_KAFKA_CLIENT_KEY_PASSWORD, WEIR_KAFKA_SASL_USER,
# WEIR_KAFKA_SASL_PASSWORD.
#
# WEIR_KAFKA_FEATURES (space-separated `name=level`) formats the storage with those feature
# levels instead of the release's defaults, e.g. `transaction.version=1` for a cluster that offers
# only the classic transaction protocol (as Kafka 3.x does).
set -euo pipefail

KAFKA_VERSION="${WEIR_KAFKA_VERSION:-4.3.1}"
HOME_DIR="${WEIR_KAFKA_HOME:-$HOME/.cache/weir-kafka}"
LIB="$HOME_DIR/lib-$KAFKA_VERSION"
RUN="${WEIR_KAFKA_RUN:-$HOME_DIR/run}"
HEAP="${WEIR_KAFKA_HEAP:--Xmx512m}"
SECURE="${WEIR_KAFKA_SECURE:-0}"
REAUTH_MS="${WEIR_KAFKA_REAUTH_MS:-4000}"
SASL_USER=weir
SASL_PASSWORD=weir-secret

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

# The throwaway PKI of secure mode, in $1: a CA, a broker certificate, a client certificate (its key
# also encrypted as PKCS#8), an expired and a wrong-host broker certificate, and a second CA that
# signed nothing the broker shows.
make_pki() {
    local d="$1"
    command -v openssl >/dev/null || { echo "kafka.sh: openssl not found (needed by --secure)" >&2; exit 1; }
    mkdir -p "$d/newcerts"
    (
        cd "$d"
        local q="-loglevel error"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 \
            -subj "/CN=weir test CA" 2>/dev/null
        openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 30 \
            -subj "/CN=weir untrusted CA" 2>/dev/null
        sign() { # name subject san [days]
            openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" \
                ${3:+-addext "subjectAltName=$3"} 2>/dev/null
            openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" \
                -days "${4:-30}" -copy_extensions copy 2>/dev/null
        }
        sign broker "/CN=localhost" "IP:127.0.0.1,DNS:localhost"
        sign wrong-host "/CN=wrong-host.invalid" "DNS:wrong-host.invalid"
        sign client "/CN=weir-client" "DNS:weir-client"
        # An expired certificate: `openssl ca` takes explicit dates.
        openssl req -newkey rsa:2048 -nodes -keyout expired.key -out expired.csr -subj "/CN=localhost" \
            -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
        : > index.txt
        echo 1000 > serial
        cat > ca.cnf <<CNF
[ ca ]
default_ca = weir
[ weir ]
database = $d/index.txt
new_certs_dir = $d/newcerts
serial = $d/serial
default_md = sha256
policy = any
copy_extensions = copy
[ any ]
commonName = supplied
CNF
        openssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr -out expired.pem \
            -startdate 20200101000000Z -enddate 20200102000000Z -notext 2>/dev/null
        openssl pkcs8 -topk8 -v2 aes-256-cbc -in client.key -out client-encrypted.key \
            -passout pass:weir-key-password 2>/dev/null
        # Kafka's PEM keystores: the private key (PKCS#8) followed by the certificate chain.
        for n in broker wrong-host expired; do cat "$n.key" "$n.pem" ca.pem > "$n-keystore.pem"; done
        rm -f ./*.csr
    ) || { echo "kafka.sh: making the test certificates failed" >&2; exit 1; }
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
    local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
    local map="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    local format_args=()
    local f
    for f in ${WEIR_KAFKA_FEATURES:-}; do
        format_args+=(--feature "$f")
    done
    rm -f "$RUN/secure.env"
    if [[ "$SECURE" == 1 ]]; then
        local sec="$RUN/secure" name used="$port $cport" p
        rm -rf "$sec"
        make_pki "$sec"
        : > "$RUN/secure.env"
        for name in SSL MTLS SASL_PLAINTEXT SASL_SSL REAUTH SSL_EXPIRED SSL_WRONG_HOST SSL_TLS12; do
            p="$(free_port)"
            while [[ " $used " == *" $p "* ]]; do p="$(free_port)"; done
            used="$used $p"
            listeners="$listeners,$name://127.0.0.1:$p"
            echo "export WEIR_KAFKA_$name=127.0.0.1:$p" >> "$RUN/secure.env"
        done
        map="$map,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,REAUTH:SASL_PLAINTEXT,SSL_EXPIRED:SSL,SSL_WRONG_HOST:SSL,SSL_TLS12:SSL"
        cat >> "$RUN/secure.env" <<ENV
export WEIR_KAFKA_REAUTH_MS=$REAUTH_MS
export WEIR_KAFKA_CA=$sec/ca.pem
export WEIR_KAFKA_OTHER_CA=$sec/other-ca.pem
export WEIR_KAFKA_CLIENT_CERT=$sec/client.pem
export WEIR_KAFKA_CLIENT_KEY=$sec/client.key
export WEIR_KAFKA_CLIENT_KEY_ENCRYPTED=$sec/client-encrypted.key
export WEIR_KAFKA_CLIENT_KEY_PASSWORD=weir-key-password
export WEIR_KAFKA_SASL_USER=$SASL_USER
export WEIR_KAFKA_SASL_PASSWORD=$SASL_PASSWORD
ENV
        format_args+=(--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$SASL_PASSWORD]"
               --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$SASL_PASSWORD]")
    fi
    local advertised="${listeners/,CONTROLLER:\/\/127.0.0.1:$cport/}"
    cat > "$data/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$map
log.dirs=$data/logs
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Consumer groups (Kafka 4's protocol) heartbeat every second and lose a silent member after
# 6 s, so the group tests see rebalances in seconds (the broker's defaults: 5 s and 45 s).
group.consumer.heartbeat.interval.ms=1000
group.consumer.min.heartbeat.interval.ms=1000
group.consumer.session.timeout.ms=6000
group.consumer.min.session.timeout.ms=6000
auto.create.topics.enable=false
log.segment.bytes=268435456
# Tests write records stamped years back (fixed times, so reads by timestamp are exact). Time
# retention would delete such a log whole at the broker's next retention check (30 s after its
# start, then every 5 minutes), under a test reading it: keep every log.
log.retention.ms=-1
# Transactions left open past their timeout are aborted within a second (the broker's default
# looks every 10 s), so the tests of a coordinator's abort wait seconds.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
PROPS
    if [[ "$SECURE" == 1 ]]; then
        local sec="$RUN/secure" l m
        local plain_jaas="org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER=\"$SASL_PASSWORD\";"
        local scram_jaas="org.apache.kafka.common.security.scram.ScramLoginModule required;"
        local oauth_jaas="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"broker\";"
        {
            echo "ssl.keystore.type=PEM"
            echo "ssl.keystore.location=$sec/broker-keystore.pem"
            echo "ssl.truststore.type=PEM"
            echo "ssl.truststore.location=$sec/ca.pem"
            echo "listener.name.mtls.ssl.client.auth=required"
            echo "listener.name.ssl_expired.ssl.keystore.type=PEM"
            echo "listener.name.ssl_expired.ssl.keystore.location=$sec/expired-keystore.pem"
            echo "listener.name.ssl_wrong_host.ssl.keystore.type=PEM"
            echo "listener.name.ssl_wrong_host.ssl.keystore.location=$sec/wrong-host-keystore.pem"
            echo "listener.name.ssl_tls12.ssl.enabled.protocols=TLSv1.2"
            echo "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
            echo "listener.name.reauth.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
            echo "listener.name.reauth.connections.max.reauth.ms=$REAUTH_MS"
            for l in sasl_plaintext sasl_ssl reauth; do
                echo "listener.name.$l.plain.sasl.jaas.config=$plain_jaas"
                for m in scram-sha-256 scram-sha-512; do
                    echo "listener.name.$l.$m.sasl.jaas.config=$scram_jaas"
                done
                echo "listener.name.$l.oauthbearer.sasl.jaas.config=$oauth_jaas"
            done
        } >> "$data/server.properties"
    fi
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
        -c "$data/server.properties" ${format_args[@]+"${format_args[@]}"} >"$data/format.log" 2>&1 \
        || { cat "$data/format.log" >&2; echo "kafka.sh: storage format failed" >&2; rm -rf "$data"; exit 1; }
    echo "$data" > "$RUN/data"
    echo "127.0.0.1:$port" > "$RUN/bootstrap"
    launch fresh
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
            # Ports are chosen free, but another program may take one before the JVM binds it:
            # a fresh start then formats new storage on other ports (twice at most).
            if [[ "${1:-}" == fresh ]] && (( ${KAFKA_SH_TRY:-1} < 3 )) \
                && grep -qs "Address already in use" "$data/stdout.log" "$data/server.log"; then
                echo "kafka.sh: a port was taken before the broker bound it; starting on other ports" >&2
                rm -f "$RUN/pid" "$RUN/data" "$RUN/bootstrap"
                rm -rf "$data"
                local again=(start)
                if [[ "$SECURE" == 1 ]]; then again+=(--secure); fi
                KAFKA_SH_TRY=$(( ${KAFKA_SH_TRY:-1} + 1 )) exec bash "$0" "${again[@]}"
            fi
            echo "kafka.sh: the broker exited during start-up; its logs:" >&2
            tail -n 50 "$data/stdout.log" "$data/server.log" >&2 || true
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
    rm -f "$RUN/bootstrap" "$RUN/secure.env"
    rm -rf "$RUN/secure"
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
    start)
        if [[ "${2:-}" == "--secure" ]]; then SECURE=1; fi
        start ;;
    env)
        if [[ -f "$RUN/secure.env" ]]; then cat "$RUN/secure.env"; else echo "kafka.sh: no secure listeners (start --secure)" >&2; exit 1; fi ;;
    stop) stop ;;
    restart) restart ;;
    status) status ;;
    classpath) fetch; classpath ;;
    *) echo "usage: $0 fetch|start [--secure]|env|stop|restart|status|classpath" >&2; exit 2 ;;
esac
