#!/usr/bin/env bash
# Real test services for auditrec on loopback:
#   Apache Kafka (KRaft, single node, broker+controller) on 127.0.0.1:9092
#   PostgreSQL 15                                        on 127.0.0.1:5432
#
#   bash scripts/services.sh up       start what is missing, wait until ready,
#                                     print the URLs (stdout) to export
#   bash scripts/services.sh down     stop only what `up` started
#   bash scripts/services.sh status   report; exit 0 only if both are ready
#   bash scripts/services.sh env      print the URLs only
#   bash scripts/services.sh promtool install Prometheus' promtool if missing (the
#                                     tests of deploy/prometheus run it)
#   bash scripts/services.sh browser  install Debian's chromium and chromium-driver if
#                                     missing (the console's browser tests drive them)
#
# Works on a fresh machine as root: installs Debian's postgresql if missing,
# fetches the broker's jars from Maven Central with Maven (scripts/kafka/pom.xml)
# and runs them with the machine's Java 17.  Everything it creates lives under
# $AUDITREC_SERVICES_DIR (default: <repo>/.services), which must be git-ignored.
# If something already listens on a port and answers like the service, it is
# reused and left alone by `down`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${AUDITREC_SERVICES_DIR:-$ROOT/.services}"

HOST=127.0.0.1
KAFKA_PORT=9092
KAFKA_CONTROLLER_PORT=9093
PG_PORT=5432
# Every test keeps its own topics: a broker that serves many suite runs holds thousands of
# partitions, and 512 MB ran out after a few suite runs and benchmarks.
KAFKA_HEAP="${AUDITREC_KAFKA_HEAP:--Xms256m -Xmx1g}"

EVENT_LOG_URL="kafka://$HOST:$KAFKA_PORT"
DATABASE_URL="postgresql://postgres@$HOST:$PG_PORT/postgres"

KAFKA_POM="$ROOT/scripts/kafka/pom.xml"
KAFKA_LOG4J="$ROOT/scripts/kafka/log4j2.xml"
KAFKA_PROBE_SRC="$ROOT/scripts/kafka/KafkaProbe.java"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_POM")"
KAFKA_DIR="$STATE/kafka"
KAFKA_LIB="$KAFKA_DIR/lib-$KAFKA_VERSION"
KAFKA_DATA="$KAFKA_DIR/data"
KAFKA_LOGS="$KAFKA_DIR/logs"
KAFKA_PROPS="$KAFKA_DIR/server.properties"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_PROBE_CLASSES="$KAFKA_DIR/probe"

PG_DIR="$STATE/postgres"
pg_pick_dir() {
    # The cluster runs as OS user postgres, which must reach its data dir. When
    # the repo sits in a folder it cannot search (e.g. under /root), the
    # cluster goes to a fixed folder derived from $STATE under /var/tmp.
    [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1 || return 0
    mkdir -p "$STATE"
    if ! runuser -u postgres -- test -x "$STATE" 2>/dev/null; then
        PG_DIR="/var/tmp/auditrec-services-$(printf '%s' "$STATE" | sha256sum | cut -c1-12)/postgres"
        mkdir -p "$(dirname "$PG_DIR")"
        chmod 755 "$(dirname "$PG_DIR")"
    fi
    PG_DATA="$PG_DIR/data"; PG_RUN="$PG_DIR/run"; PG_LOG="$PG_DIR/postgres.log"
}
PG_DATA="$PG_DIR/data"
PG_RUN="$PG_DIR/run"
PG_LOG="$PG_DIR/postgres.log"

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] ERROR: %s\n' "$*" >&2; exit 1; }

# --- helpers ---------------------------------------------------------------

port_open() { # host port -> 0 if something accepts TCP connections
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

need_root() {
    [ "$(id -u)" = 0 ] || die "$1 needs root (run as root, as CI does)"
}

# --- PostgreSQL -------------------------------------------------------------

PG_BIN=""
find_pg_bin() {
    local d
    PG_BIN=""
    for d in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
            PG_BIN="$d"; return 0
        fi
    done
    return 1
}

ensure_pg_installed() {
    find_pg_bin && return 0
    need_root "installing PostgreSQL"
    log "installing Debian's postgresql (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the package's own 'main' cluster from being started on port 5432
    # during installation: only if no policy is in place already.
    local policy_added=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_added=1
    fi
    local rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql; } >&2 || rc=$?
    [ "$policy_added" = 1 ] && rm -f /usr/sbin/policy-rc.d
    [ "$rc" = 0 ] || die "apt-get install postgresql failed"
    find_pg_bin || die "postgresql installed but no /usr/lib/postgresql/*/bin/initdb found"
}

pg_answers() { # 0 if a server on HOST:PG_PORT takes `select 1` as role postgres without a password
    PGCONNECT_TIMEOUT=3 psql_cmd -w -X -q -t -A -d "$DATABASE_URL" -c 'select 1' 2>/dev/null | grep -qx 1
}

psql_cmd() {
    if command -v psql >/dev/null 2>&1; then
        env -u PGPASSWORD -u PGSERVICE psql "$@"
    else
        env -u PGPASSWORD -u PGSERVICE "$PG_BIN/psql" "$@"
    fi
}

pg_isready_cmd() {
    if [ -n "$PG_BIN" ] && [ -x "$PG_BIN/pg_isready" ]; then "$PG_BIN/pg_isready" "$@"
    else pg_isready "$@"; fi
}

as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"   # already a non-root user: run the cluster as ourselves
    fi
}

pg_ours_running() { # 0 if our own cluster is running
    [ -f "$PG_DATA/PG_VERSION" ] && [ -n "$PG_BIN" ] || return 1
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1
}

pg_init() {
    [ -f "$PG_DATA/PG_VERSION" ] && return 0
    log "initdb $PG_DATA"
    rm -rf "$PG_DATA"
    mkdir -p "$PG_DATA" "$PG_RUN"
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 || die "no 'postgres' OS user (is the postgresql package installed?)"
        chown postgres:postgres "$PG_DIR" "$PG_DATA" "$PG_RUN"
        runuser -u postgres -- test -w "$PG_DATA" \
            || die "OS user postgres cannot write $PG_DATA; set AUDITREC_SERVICES_DIR to another folder"
    fi
    chmod 700 "$PG_DATA"
    as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --locale=C \
        --no-sync >"$PG_DIR/initdb.log" 2>&1 || { cat "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
    # unix socket paths are limited to ~107 bytes; fall back to TCP only
    local sockdir="$PG_RUN"
    [ "${#PG_RUN}" -lt 90 ] || sockdir=""
    cat >>"$PG_DATA/postgresql.conf" <<EOF

# --- auditrec test server (scripts/services.sh): throwaway data, tuned for tests
listen_addresses = '$HOST'
port = $PG_PORT
unix_socket_directories = '$sockdir'
max_connections = 200
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
logging_collector = off
EOF
}

pg_up() {
    ensure_pg_installed
    pg_pick_dir
    if port_open "$HOST" "$PG_PORT"; then
        if pg_answers; then
            if pg_ours_running; then log "postgres: already running (ours, $PG_DATA)"
            else log "postgres: something already answers on $HOST:$PG_PORT; reusing it"; fi
            return 0
        fi
        # might be a server of ours that is still starting
        for _ in $(seq 1 30); do pg_answers && return 0; sleep 1; done
        die "port $HOST:$PG_PORT is taken by something that does not accept 'select 1' as role postgres without a password"
    fi
    pg_init
    log "postgres: starting ($("$PG_BIN/postgres" --version))"
    as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 -s start >&2 9>&- \
        || { tail -n 30 "$PG_LOG" >&2 || true; die "pg_ctl start failed"; }
}

pg_wait_ready() {
    for _ in $(seq 1 60); do
        if pg_isready_cmd -q -h "$HOST" -p "$PG_PORT" -U postgres -d postgres && pg_answers; then
            log "postgres ready at $DATABASE_URL"
            return 0
        fi
        sleep 1
    done
    tail -n 30 "$PG_LOG" >&2 2>/dev/null || true
    die "postgres not ready at $HOST:$PG_PORT after 60 s"
}

pg_down() {
    find_pg_bin || true
    if pg_ours_running; then
        log "postgres: stopping ours ($PG_DATA)"
        as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 -s stop >&2 || die "pg_ctl stop failed"
    else
        log "postgres: none of ours running"
    fi
}

# --- Kafka -------------------------------------------------------------------

ensure_java() {
    command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 && return 0
    need_root "installing a JDK"
    log "installing openjdk-17-jdk-headless (apt-get)"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jdk-headless; } >&2 \
        || die "cannot install a JDK"
}

ensure_maven() {
    command -v mvn >/dev/null 2>&1 && return 0
    need_root "installing Maven"
    log "installing maven (apt-get)"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven; } >&2 \
        || die "cannot install maven"
}

kafka_fetch() {
    [ -n "$KAFKA_VERSION" ] || die "no <kafka.version> in $KAFKA_POM"
    if [ -f "$KAFKA_LIB/.complete" ] && [ "$KAFKA_POM" -ot "$KAFKA_LIB/.complete" ]; then
        return 0
    fi
    ensure_maven
    log "kafka: fetching kafka_2.13:$KAFKA_VERSION and its runtime dependencies from Maven Central"
    rm -rf "$KAFKA_LIB.tmp"
    mkdir -p "$KAFKA_DIR"
    mvn -q -B -Dstyle.color=never -f "$KAFKA_POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIB.tmp" >"$KAFKA_DIR/mvn.log" 2>&1 \
        || { tail -n 40 "$KAFKA_DIR/mvn.log" >&2; die "maven could not fetch the Kafka jars"; }
    [ -f "$KAFKA_LIB.tmp/kafka_2.13-$KAFKA_VERSION.jar" ] || die "kafka_2.13-$KAFKA_VERSION.jar missing after fetch"
    rm -rf "$KAFKA_LIB"
    mv "$KAFKA_LIB.tmp" "$KAFKA_LIB"
    touch "$KAFKA_LIB/.complete"
    # old versions' jars are of no further use
    find "$KAFKA_DIR" -maxdepth 1 -type d -name 'lib-*' ! -name "lib-$KAFKA_VERSION" -exec rm -rf {} + 2>/dev/null || true
}

kafka_probe_build() {
    local stamp="$KAFKA_PROBE_CLASSES/.built-$KAFKA_VERSION"
    if [ -f "$stamp" ] && [ "$KAFKA_PROBE_SRC" -ot "$stamp" ]; then return 0; fi
    rm -rf "$KAFKA_PROBE_CLASSES"
    mkdir -p "$KAFKA_PROBE_CLASSES"
    javac -nowarn -cp "$KAFKA_LIB/*" -d "$KAFKA_PROBE_CLASSES" "$KAFKA_PROBE_SRC" >&2 \
        || die "cannot compile $KAFKA_PROBE_SRC"
    touch "$stamp"
}

kafka_probe() { # timeout-seconds [warm]
    java -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dlog4j2.level=OFF \
        -cp "$KAFKA_LIB/*:$KAFKA_PROBE_CLASSES" KafkaProbe "$HOST:$KAFKA_PORT" "$@"
}

kafka_ours_pid() { # prints the pid of our broker if it runs
    [ -f "$KAFKA_PID" ] || return 1
    local pid
    pid="$(cat "$KAFKA_PID" 2>/dev/null)"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "kafka.Kafka $KAFKA_PROPS" || return 1
    echo "$pid"
}

kafka_write_config() {
    mkdir -p "$KAFKA_DATA" "$KAFKA_LOGS"
    # keep in sync with docker-compose.yml (service kafka)
    cat >"$KAFKA_PROPS" <<EOF
# generated by scripts/services.sh: Kafka $KAFKA_VERSION, KRaft, single node
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DATA
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# topics are created explicitly (auditrec init) with their own configs
auto.create.topics.enable=false
delete.topic.enable=true
EOF
}

kafka_java() { # main-class args...
    # shellcheck disable=SC2086
    java $KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
        -Dkafka.logs.dir="$KAFKA_LOGS" -Dlog4j2.configurationFile="$KAFKA_LOG4J" \
        -cp "$KAFKA_LIB/*" "$@"
}

kafka_up() {
    ensure_java
    kafka_fetch
    kafka_probe_build
    if port_open "$HOST" "$KAFKA_PORT"; then
        if kafka_ours_pid >/dev/null; then
            log "kafka: already running (ours, pid $(kafka_ours_pid))"
        else
            log "kafka: something already listens on $HOST:$KAFKA_PORT; reusing it if it answers"
        fi
        return 0
    fi
    if port_open "$HOST" "$KAFKA_CONTROLLER_PORT"; then
        die "port $HOST:$KAFKA_CONTROLLER_PORT (KRaft controller) is taken but $HOST:$KAFKA_PORT is free"
    fi
    kafka_write_config
    if [ ! -f "$KAFKA_DATA/meta.properties" ]; then
        local cluster_id
        cluster_id="$(kafka_java kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
        log "kafka: formatting storage (cluster id $cluster_id)"
        kafka_java kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" \
            -c "$KAFKA_PROPS" >"$KAFKA_LOGS/format.log" 2>&1 \
            || { cat "$KAFKA_LOGS/format.log" >&2; die "kafka storage format failed"; }
    fi
    log "kafka: starting $KAFKA_VERSION (KRaft, log in $KAFKA_LOGS/server.log)"
    rm -f "$KAFKA_PID"
    # own session, so that the caller's Ctrl-C or process-group kill does not
    # reach it; the inner shell records its pid, then becomes the JVM (exec).
    # fd 9 (the lock) is not passed on.
    # shellcheck disable=SC2016,SC2086
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$KAFKA_PID" \
        java $KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
        -Dkafka.logs.dir="$KAFKA_LOGS" -Dlog4j2.configurationFile="$KAFKA_LOG4J" \
        -cp "$KAFKA_LIB/*" kafka.Kafka "$KAFKA_PROPS" \
        </dev/null >"$KAFKA_LOGS/stdout.log" 2>&1 9>&- &
    for _ in $(seq 1 50); do [ -s "$KAFKA_PID" ] && break; sleep 0.1; done
}

kafka_wait_ready() {
    local deadline=$((SECONDS + 120))
    # wait for the port first, watching that our broker does not die
    until port_open "$HOST" "$KAFKA_PORT"; do
        if [ -f "$KAFKA_PID" ] && ! kafka_ours_pid >/dev/null; then
            tail -n 40 "$KAFKA_LOGS/server.log" "$KAFKA_LOGS/stdout.log" >&2 2>/dev/null || true
            die "kafka broker exited during startup"
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "kafka: nothing listens on $HOST:$KAFKA_PORT after 120 s"
        sleep 0.5
    done
    kafka_probe "$((deadline - SECONDS > 10 ? deadline - SECONDS : 10))" warm >&2 \
        || { tail -n 40 "$KAFKA_LOGS/server.log" >&2 2>/dev/null || true; die "kafka not ready"; }
}

kafka_down() {
    local pid
    if pid="$(kafka_ours_pid)"; then
        log "kafka: stopping ours (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 60); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        if kill -0 "$pid" 2>/dev/null; then
            log "kafka: still running after 30 s, killing pid $pid"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    else
        log "kafka: none of ours running"
    fi
    rm -f "$KAFKA_PID"
}

# --- promtool ----------------------------------------------------------------

# Debian's prometheus package ships promtool next to the server. Only the tool is
# wanted: no Prometheus server may be left running (or failing) after the install.
ensure_promtool() {
    if command -v promtool >/dev/null 2>&1 && promtool --version >/dev/null 2>&1; then
        return 0
    fi
    need_root "installing promtool"
    log "installing Debian's prometheus for promtool (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the package's postinst from starting the server (invoke-rc.d obeys
    # policy-rc.d; without systemd it would otherwise run /etc/init.d/prometheus).
    local policy_added=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        policy_added=1
    fi
    local rc=0
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; } >&2 || rc=$?
    [ "$policy_added" = 1 ] && rm -f /usr/sbin/policy-rc.d
    [ "$rc" = 0 ] || die "apt-get install prometheus failed"
    command -v promtool >/dev/null 2>&1 || die "prometheus installed but no promtool on PATH"
    log "$(promtool --version 2>&1 | head -n 1)"
}

# --- browser ----------------------------------------------------------------

# The console's browser tests drive Debian's chromium through its chromedriver, both
# at fixed paths: nothing downloads a browser build of its own.
ensure_browser() {
    if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] \
        && /usr/bin/chromedriver --version >/dev/null 2>&1; then
        return 0
    fi
    need_root "installing chromium"
    log "installing Debian's chromium and chromium-driver (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver; } >&2 \
        || die "apt-get install chromium chromium-driver failed"
    [ -x /usr/bin/chromium ] || die "chromium installed but no /usr/bin/chromium"
    [ -x /usr/bin/chromedriver ] || die "chromium-driver installed but no /usr/bin/chromedriver"
    log "$(/usr/bin/chromium --version 2>&1 | head -n 1)"
}

# --- commands ---------------------------------------------------------------

print_env() {
    echo "AUDITREC_EVENT_LOG_URL=$EVENT_LOG_URL"
    echo "AUDITREC_DATABASE_URL=$DATABASE_URL"
}

with_lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/.lock"
    flock -w 600 9 || die "another services.sh holds $STATE/.lock"
}

cmd_up() {
    with_lock
    local t0=$SECONDS
    pg_up
    kafka_up
    pg_wait_ready
    kafka_wait_ready
    log "up in $((SECONDS - t0)) s"
    print_env
}

cmd_down() {
    with_lock
    pg_pick_dir
    kafka_down
    pg_down
}

cmd_kafka_restart() { # for fault tests: stop our broker and start it again on the same data
    with_lock
    [ -n "$(kafka_ours_pid || true)" ] || die "the Kafka broker on $HOST:$KAFKA_PORT was not started by this script"
    kafka_down
    kafka_up
    kafka_wait_ready
}

cmd_postgres_restart() { # for fault tests: stop our PostgreSQL and start it again
    with_lock
    pg_pick_dir
    find_pg_bin || true
    pg_ours_running || die "the PostgreSQL server on $HOST:$PG_PORT was not started by this script"
    pg_down
    pg_up
    pg_wait_ready
}

cmd_status() {
    local ok=0
    pg_pick_dir
    find_pg_bin || true
    if pg_answers; then
        if pg_ours_running; then echo "postgres: ready at $DATABASE_URL (ours, $PG_DATA)"
        else echo "postgres: ready at $DATABASE_URL (not started by this script)"; fi
    else
        echo "postgres: not ready at $HOST:$PG_PORT"; ok=1
    fi
    local pid=""
    pid="$(kafka_ours_pid)" || pid=""
    if port_open "$HOST" "$KAFKA_PORT" && [ -d "$KAFKA_PROBE_CLASSES" ] && kafka_probe 10 >/dev/null 2>&1; then
        if [ -n "$pid" ]; then echo "kafka:    ready at $EVENT_LOG_URL (ours, pid $pid, $KAFKA_VERSION)"
        else echo "kafka:    ready at $EVENT_LOG_URL (not started by this script)"; fi
    elif port_open "$HOST" "$KAFKA_PORT"; then
        echo "kafka:    something listens on $HOST:$KAFKA_PORT${pid:+ (ours, pid $pid)} but the probe did not succeed"; ok=1
    else
        echo "kafka:    not running at $HOST:$KAFKA_PORT"; ok=1
    fi
    return $ok
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) print_env ;;
    promtool) ensure_promtool ;;
    browser) ensure_browser ;;
    kafka-stop) with_lock; kafka_down ;;
    kafka-start) with_lock; kafka_up; kafka_wait_ready ;;
    kafka-restart) cmd_kafka_restart ;;
    postgres-restart) cmd_postgres_restart ;;
    *) echo "usage: $0 up|down|status|env|promtool|kafka-stop|kafka-start|kafka-restart|postgres-restart" >&2; exit 2 ;;
esac
