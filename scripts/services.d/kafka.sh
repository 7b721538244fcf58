# Apache Kafka for the tests, from Maven Central: the broker's jars
# (scripts/services.d/kafka/pom.xml) are resolved once with Maven into the
# tools dir and run on the machine's Java (17 or newer), in KRaft mode.
#
#   kafka          one broker (and controller) on 127.0.0.1:9092, controller
#                  on 9093; data in the tools dir, formatted afresh at each
#                  start (a test broker: topics do not outlive it). Beside
#                  the plain listener, a SASL_SSL one on 127.0.0.1:9094:
#                  TLS with the test CA's certificate
#                  (scripts/services.d/tls.sh; a client certificate is
#                  checked when one is sent), SASL SCRAM-SHA-256 and
#                  SCRAM-SHA-512 for user consumer_tls with the test
#                  password (made at format), and OAUTHBEARER with the
#                  unsecured JWTs a test broker accepts; and an SSL one on
#                  127.0.0.1:9095 that requires a client certificate the
#                  test CA signed (mutual TLS). A broker of this
#                  script's without it (started by an older one) is started
#                  again.
#                  KAFKA_BROKERS points the tests at another Kafka instead,
#                  and then nothing is started.
#   kafka-cluster  three brokers, each also a controller, on
#                  127.0.0.1:19092, 19093 and 19094 (controllers on 19192,
#                  19193, 19194), default replication factor 3 and
#                  min.insync.replicas 2: for the tests that lose a broker.
#                  `scripts/services kafka-node N` starts node N (1-3) again
#                  on its kept data; each node's pid is in
#                  $CONSUMER_TOOLS_DIR/services/kafka-cluster/nodeN.pid.
#                  Each node N also has a PROXIED listener on 127.0.0.1
#                  port 19392+N (19393-19395) that advertises the port 100
#                  above it (19493-19495) instead: where the link-fault tests
#                  (tests/kafka_links.rs) run a TCP proxy to it, so that
#                  every connection a client opens after reading the
#                  metadata goes through the proxy too.
#   kafka-connect  a Kafka Connect worker (standalone, REST on
#                  127.0.0.1:8083) with Debezium's PostgreSQL connector, for
#                  the outbox's CDC test; needs `kafka` and `postgres`.
#
# Logs: $CONSUMER_TOOLS_DIR/services/<name>/server.log.
# shellcheck shell=bash

kafka_version=4.4.0
kafka_libs="$tools_dir/kafka-$kafka_version/libs"
connect_version=4.3.0
connect_libs="$tools_dir/kafka-connect-$connect_version/libs"
log4j_conf="$repo_dir/scripts/services.d/log4j2.properties"

java_ok() {
  command -v java >/dev/null || return 1
  local v; v="$(java -version 2>&1 | awk -F'"' '/version/ { print $2; exit }')"
  [ "${v%%.*}" -ge 17 ] 2>/dev/null
}

ensure_java_and_maven() {
  if ! java_ok; then
    can_install_packages || die "Kafka needs Java 17 or newer and this machine has $(java -version 2>&1 | head -n 1 || echo none), with no way to install one here (no root, no passwordless sudo): install openjdk-17-jre-headless, or point KAFKA_BROKERS at a running Kafka."
    say "installing Java 17 from Debian's packages (openjdk-17-jre-headless)"
    apt_install openjdk-17-jre-headless || die "apt-get could not install openjdk-17-jre-headless: install Java 17 by hand, or point KAFKA_BROKERS at a running Kafka."
  fi
  if ! command -v mvn >/dev/null; then
    can_install_packages || die "Kafka's jars are resolved from Maven Central with Maven (mvn), which is not installed here: install maven, or point KAFKA_BROKERS at a running Kafka."
    say "installing Maven from Debian's packages (maven)"
    apt_install maven || die "apt-get could not install maven: install it by hand, or point KAFKA_BROKERS at a running Kafka."
  fi
}

# Resolves a pom's runtime dependencies into a libs dir, once per pom
# version (a stamp holds the pom's checksum).
resolve_jars() {
  local pom="$1" libs="$2" what="$3"
  local sum; sum="$(sha256sum "$pom" | cut -d' ' -f1)"
  [ -f "$libs/.resolved" ] && [ "$(cat "$libs/.resolved")" = "$sum" ] && return 0
  ensure_java_and_maven
  mkdir -p "$(dirname "$libs")"
  exec 8>"$(dirname "$libs")/.resolve.lock"
  flock 8 2>/dev/null || true
  if ! { [ -f "$libs/.resolved" ] && [ "$(cat "$libs/.resolved")" = "$sum" ]; }; then
    say "resolving $what from Maven Central into $libs (once)"
    local t0; t0="$(now)"
    rm -rf "$libs.tmp"
    mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs.tmp" >"$(dirname "$libs")/mvn.log" 2>&1 \
      || { tail -n 20 "$(dirname "$libs")/mvn.log" >&2; die "Maven could not resolve $what from Maven Central (its log ends above, in full in $(dirname "$libs")/mvn.log): this machine needs Maven Central reachable, or point KAFKA_BROKERS at a running Kafka."; }
    echo "$sum" >"$libs.tmp/.resolved"
    rm -rf "$libs"
    mv "$libs.tmp" "$libs"
    say "$what resolved in $(since "$t0") ($(ls "$libs" | wc -l) jars)"
  fi
  exec 8>&-
}

# server.properties of one KRaft node. $1 dir, $2 node id, $3 broker port,
# $4 controller port, $5 the controller quorum, $6 replication factor,
# $7 (optional, may be empty) the port of a PROXIED listener, which
# advertises port $7 + 100, where a test's proxy listens; $8 and $9
# (optional) the ports of the SASL_SSL and SSL listeners (see the top of
# this file).
kafka_properties() {
  local dir="$1" id="$2" port="$3" cport="$4" voters="$5" rf="$6" pport="${7:-}" sport="${8:-}" mport="${9:-}"
  local isr=1; [ "$rf" -ge 3 ] && isr=2
  local listeners="PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport"
  local advertised="PLAINTEXT://127.0.0.1:$port"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [ -n "$pport" ]; then
    listeners="$listeners,PROXIED://127.0.0.1:$pport"
    advertised="$advertised,PROXIED://127.0.0.1:$((pport + 100))"
    protocols="$protocols,PROXIED:PLAINTEXT"
  fi
  if [ -n "$sport" ]; then
    listeners="$listeners,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport"
    advertised="$advertised,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$mport"
    protocols="$protocols,SASL_SSL:SASL_SSL,SSL:SSL"
  fi
  cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
# The tests create their topics with the admin API, as production should.
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
# A group's first member gets its partitions at once, not after 3 s.
group.initial.rebalance.delay.ms=0
# Tests use short session timeouts to see a killed member leave.
group.min.session.timeout.ms=1000
log.segment.bytes=67108864
log.retention.hours=24
num.recovery.threads.per.data.dir=1
PROPS
  [ -n "$sport" ] && cat >>"$dir/server.properties" <<PROPS
# The secured listeners. SASL_SSL: TLS with the test CA's certificate, a
# client certificate checked when one is sent, SCRAM users made at format.
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$tls_dir/kafka-server.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$tls_dir/ca.pem
listener.name.sasl_ssl.ssl.client.auth=requested
# SSL: TLS with a client certificate the test CA signed, required.
listener.name.ssl.ssl.keystore.type=PEM
listener.name.ssl.ssl.keystore.location=$tls_dir/kafka-server.pem
listener.name.ssl.ssl.truststore.type=PEM
listener.name.ssl.ssl.truststore.location=$tls_dir/ca.pem
listener.name.ssl.ssl.client.auth=required
PROPS
  return 0
}

kafka_started() { grep -q "Kafka Server started" "$1" 2>/dev/null; }

# The broker on 127.0.0.1:$1 answers an ApiVersions request within 10 s (a
# port that takes connections can belong to a stopped or dying process).
# The reason it did not is in $kafka_probe_error.
kafka_answers() {
  command -v python3 >/dev/null || { tcp_up 127.0.0.1 "$1"; return; }
  kafka_probe_error="$(python3 "$lib/probe.py" kafka "127.0.0.1:$1" 10 2>&1)"
}

# Stops the process in pid file $1 (SIGTERM, SIGKILL after 20 s) and waits
# until it has exited.
kafka_kill() {
  local f="$1" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  rm -f "$f"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -CONT "$pid" 2>/dev/null
  kill "$pid" 2>/dev/null
  for i in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  say "pid $pid did not exit within 20 s of SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null
  for i in $(seq 1 20); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
}

# Whether the Kafka node with pid file $1 on port $2 serves: its process
# runs (and is not stopped) and it answers on its port. A node of ours that
# has its port open but does not answer is stopped, with a line that says
# so; the caller then starts it again. Returns 1 when it needs starting.
kafka_node_serves() {
  local f="$1" port="$2" label="$3" pid state
  tcp_up 127.0.0.1 "$port" || { kafka_kill "$f"; return 1; }
  kafka_answers "$port" && return 0
  [ -f "$f" ] || die "something on 127.0.0.1:$port takes connections but does not answer as Kafka ($kafka_probe_error), and it is not a process this script started: stop it, or point KAFKA_BROKERS at a running Kafka."
  pid="$(cat "$f")"
  state="$(ps -o stat= -p "$pid" 2>/dev/null || echo gone)"
  say "Kafka ($label, pid $pid, state ${state// /}) has 127.0.0.1:$port open but did not answer ApiVersions within 10 s ($kafka_probe_error): stopping it and starting it again"
  kafka_kill "$f"
  return 1
}

# Starts one node from its dir (formatted already) and waits until it
# serves; $1 dir, $2 port, $3 label.
kafka_spawn() {
  local dir="$1" port="$2" label="$3"
  local t0; t0="$(now)"
  : >"$dir/server.log"
  local pid
  pid="$(spawn_detached "$dir/stdout.log" java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$log4j_conf" -Dconsumer.log.file="$dir/server.log" \
    -cp "$kafka_libs/*" kafka.Kafka "$dir/server.properties")"
  echo "$pid" >"$dir.pid"
  PID_TO_WATCH="$pid" wait_until 90 kafka_started "$dir/server.log" && tcp_up 127.0.0.1 "$port" || {
    tail -n 20 "$dir/server.log" "$dir/stdout.log" >&2 || true
    die "Kafka ($label) exited or did not start on 127.0.0.1:$port within 90 s (its log ends above; in full in $dir/server.log): fix that, or point KAFKA_BROKERS at a running Kafka."
  }
  say "Kafka $kafka_version ($label, pid $pid) started in $(since "$t0") on 127.0.0.1:$port, log in $dir/server.log"
}

# Formats node dir $1 for cluster id $2; further arguments go to the
# storage tool (the SCRAM users).
kafka_format() {
  local dir="$1" cluster_id="$2"; shift 2
  java -cp "$kafka_libs/*" -Dlog4j2.configurationFile="$log4j_conf" -Dconsumer.log.file="$dir/format.log" \
    kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" "$@" >"$dir/format.out" 2>&1 \
    || { cat "$dir/format.out" >&2; die "Kafka's storage tool could not format $dir/data (output above)."; }
}

# The secured listeners of the single broker.
kafka_sasl_ssl_port="${KAFKA_SASL_SSL_PORT:-9094}"
kafka_mtls_port="${KAFKA_MTLS_PORT:-9095}"

# The single broker's SASL_SSL listener answers ApiVersions over TLS (the
# test CA checked); the reason it did not is in $kafka_probe_error.
kafka_sasl_ssl_answers() {
  command -v python3 >/dev/null || { tcp_up 127.0.0.1 "$kafka_sasl_ssl_port"; return; }
  kafka_probe_error="$(PROBE_CA_FILE="$tls_dir/ca.pem" python3 "$lib/probe.py" kafka "127.0.0.1:$kafka_sasl_ssl_port" 10 2>&1)"
}

kafka_cluster_id() { java -cp "$kafka_libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1; }

ensure_kafka() {
  if [ -n "${KAFKA_BROKERS:-}" ]; then
    local first="${KAFKA_BROKERS%%,*}"
    first="${first//[[:space:]]/}"; first="${first#*://}"
    local host="${first%:*}" port="${first##*:}"
    [ "$port" = "$first" ] && port=9092
    host="${host#[}"; host="${host%]}"
    if tcp_up "$host" "$port"; then say "Kafka is up at $host:$port (KAFKA_BROKERS)"; return; fi
    die "Kafka is not reachable at $host:$port, the first broker in KAFKA_BROKERS=$KAFKA_BROKERS: start that Kafka, or unset KAFKA_BROKERS to have a local Apache Kafka started on 127.0.0.1:9092."
  fi
  if use_docker; then
    if tcp_up 127.0.0.1 9092; then say "Kafka is up at 127.0.0.1:9092"; return; fi
    compose_up kafka
    wait_until 90 tcp_up 127.0.0.1 9092 || die "the docker compose Kafka does not answer on 127.0.0.1:9092 within 90 s."
    say "Kafka is up at 127.0.0.1:9092 (docker compose)"
    return
  fi
  ensure_tls_material
  if kafka_node_serves "$services_dir/kafka.pid" 9092 "single broker"; then
    if kafka_sasl_ssl_answers; then
      say "Kafka is up at 127.0.0.1:9092 (SASL_SSL on 127.0.0.1:$kafka_sasl_ssl_port)"
      return
    fi
    say "Kafka at 127.0.0.1:9092 has no working SASL_SSL listener on 127.0.0.1:$kafka_sasl_ssl_port ($kafka_probe_error; started by an older scripts/services?): starting it again, with one (its topics go)"
    kafka_kill "$services_dir/kafka.pid"
  fi
  resolve_jars "$repo_dir/scripts/services.d/kafka/pom.xml" "$kafka_libs" "Apache Kafka $kafka_version"
  local dir="$services_dir/kafka" password
  rm -rf "$dir"
  mkdir -p "$dir"
  kafka_properties "$dir" 1 9092 9093 "1@127.0.0.1:9093" 1 "" "$kafka_sasl_ssl_port" "$kafka_mtls_port"
  password="$(tls_password)"
  kafka_format "$dir" "$(kafka_cluster_id)" \
    --add-scram "SCRAM-SHA-256=[name=$tls_user,password=$password]" \
    --add-scram "SCRAM-SHA-512=[name=$tls_user,password=$password]"
  kafka_spawn "$dir" 9092 "single broker"
  wait_until 30 kafka_sasl_ssl_answers \
    || die "Kafka started on 127.0.0.1:9092 but its SASL_SSL listener on 127.0.0.1:$kafka_sasl_ssl_port does not answer ApiVersions over TLS ($kafka_probe_error; see $dir/server.log)."
  say "Kafka's secured listeners are up: SASL_SSL at 127.0.0.1:$kafka_sasl_ssl_port (SCRAM-SHA-256/512 user $tls_user, OAUTHBEARER), SSL with client certificates at 127.0.0.1:$kafka_mtls_port; CA $tls_dir/ca.pem"
}

cluster_dir="$services_dir/kafka-cluster"
cluster_voters="1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"

# Starts node $1 of the three-broker cluster on its kept data.
ensure_kafka_node() {
  local n="$1" port=$((19091 + $1)) cport=$((19191 + $1))
  case "$n" in 1 | 2 | 3) ;; *) die "kafka-node takes a node number, 1 to 3 (got '$n')" ;; esac
  if kafka_node_serves "$cluster_dir/node$n.pid" "$port" "cluster node $n"; then say "Kafka cluster node $n is up at 127.0.0.1:$port"; return; fi
  [ -f "$cluster_dir/node$n/server.properties" ] || die "the Kafka cluster was never formatted here: run scripts/services kafka-cluster first."
  kafka_spawn "$cluster_dir/node$n" "$port" "cluster node $n"
}

ensure_kafka_cluster() {
  local up=0 n
  for n in 1 2 3; do kafka_node_serves "$cluster_dir/node$n.pid" $((19091 + n)) "cluster node $n" && up=$((up + 1)); done
  if [ "$up" -eq 3 ]; then
    for n in 1 2 3; do
      tcp_up 127.0.0.1 $((19392 + n)) || die "the Kafka cluster on 127.0.0.1:19092-19094 has no PROXIED listener on 127.0.0.1:$((19392 + n)) (it was started by an older scripts/services): stop its three nodes (the pids in $cluster_dir/node*.pid) and run scripts/services kafka-cluster again."
    done
    say "Kafka cluster is up at 127.0.0.1:19092,19093,19094 (proxied listeners on 19393-19395)"
    return
  fi
  resolve_jars "$repo_dir/scripts/services.d/kafka/pom.xml" "$kafka_libs" "Apache Kafka $kafka_version"
  if [ "$up" -eq 0 ]; then
    rm -rf "$cluster_dir"
    local id; id="$(kafka_cluster_id)"
    for n in 1 2 3; do
      mkdir -p "$cluster_dir/node$n"
      kafka_properties "$cluster_dir/node$n" "$n" $((19091 + n)) $((19191 + n)) "$cluster_voters" 3 $((19392 + n))
      kafka_format "$cluster_dir/node$n" "$id"
    done
  fi
  # The nodes wait for a controller quorum before they serve: start all
  # three, then wait for each.
  local t0 started=(); t0="$(now)"
  for n in 1 2 3; do
    kafka_node_serves "$cluster_dir/node$n.pid" $((19091 + n)) "cluster node $n" && continue
    started+=("$n")
    : >"$cluster_dir/node$n/server.log"
    spawn_detached "$cluster_dir/node$n/stdout.log" java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$log4j_conf" -Dconsumer.log.file="$cluster_dir/node$n/server.log" \
      -cp "$kafka_libs/*" kafka.Kafka "$cluster_dir/node$n/server.properties" >"$cluster_dir/node$n.pid"
  done
  for n in "${started[@]}"; do
    PID_TO_WATCH="$(cat "$cluster_dir/node$n.pid")" wait_until 120 kafka_started "$cluster_dir/node$n/server.log" || {
      tail -n 20 "$cluster_dir/node$n/server.log" >&2 || true
      die "Kafka cluster node $n did not start on 127.0.0.1:$((19091 + n)) within 120 s (its log ends above)."
    }
  done
  say "Kafka cluster node(s) ${started[*]} of 3 started in $(since "$t0"); the cluster serves on 127.0.0.1:19092,19093,19094, logs in $cluster_dir"
}

connect_up() { curl -sf -m 2 http://127.0.0.1:8083/connector-plugins 2>/dev/null | grep -q PostgresConnector; }

ensure_kafka_connect() {
  if connect_up; then say "Kafka Connect (with Debezium) is up at http://127.0.0.1:8083"; return; fi
  command -v curl >/dev/null || die "curl is not installed: the Kafka Connect check and the CDC test use it (apt-get install curl)."
  local brokers="${KAFKA_BROKERS:-127.0.0.1:9092}"
  resolve_jars "$repo_dir/scripts/services.d/kafka-connect/pom.xml" "$connect_libs" "Kafka Connect $connect_version with Debezium's PostgreSQL connector"
  local dir="$services_dir/kafka-connect"
  rm -rf "$dir"
  mkdir -p "$dir"
  cat >"$dir/worker.properties" <<PROPS
bootstrap.servers=$brokers
listeners=http://127.0.0.1:8083
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
offset.storage.file.filename=$dir/offsets
offset.flush.interval.ms=1000
# The connector and its plugins are on the worker's classpath.
plugin.discovery=only_scan
PROPS
  local t0; t0="$(now)"
  : >"$dir/server.log"
  local pid
  pid="$(spawn_detached "$dir/stdout.log" java -Xms128m -Xmx768m -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$log4j_conf" -Dconsumer.log.file="$dir/server.log" \
    -cp "$connect_libs/*" org.apache.kafka.connect.cli.ConnectStandalone "$dir/worker.properties")"
  echo "$pid" >"$dir.pid"
  PID_TO_WATCH="$pid" wait_until 120 connect_up || {
    tail -n 20 "$dir/server.log" "$dir/stdout.log" >&2 || true
    die "Kafka Connect did not serve http://127.0.0.1:8083 with Debezium's PostgreSQL connector within 120 s (its log ends above; in full in $dir/server.log)."
  }
  say "Kafka Connect $connect_version with Debezium (pid $pid) started in $(since "$t0") on http://127.0.0.1:8083"
}

# Stops what `kafka`, `kafka-cluster` and `kafka-connect` started, and
# waits until those processes have exited (SIGKILL 20 s after SIGTERM): a
# broker shuts down for seconds after its signal, with its port still open,
# and a start right after must not take it for running.
stop_kafka() {
  local f
  for f in "$services_dir/kafka-connect.pid" "$services_dir/kafka.pid" "$cluster_dir"/node*.pid; do
    [ -f "$f" ] || continue
    say "stopping $(basename "$f" .pid) (pid $(cat "$f"))"
    kafka_kill "$f" &
  done
  wait
  return 0
}
