#!/usr/bin/env bash
# Apache Kafka on loopback for the real-broker tests and benchmarks: Kafka's own jars from
# Maven Central (tests/kafka/pom.xml), KRaft combined nodes (broker + controller in one JVM),
# started once per test run. State lives in $KDIRECT_KAFKA_HOME (default target/kafka).
#
#   kafka.sh up [CLUSTER...]        fetch jars if missing; start every cluster (or those named)
#                                   not yet answering
#   kafka.sh down [CLUSTER...]      stop every node (of every cluster, or of those named)
#   kafka.sh is-up CLUSTER          exit 0 when every node of CLUSTER answers
#   kafka.sh env                    print the KDIRECT_TEST_KAFKA* variables to export
#   kafka.sh stop  CLUSTER NODE     stop one node (SIGTERM, controlled shutdown)
#   kafka.sh kill  CLUSTER NODE     SIGKILL one node
#   kafka.sh start CLUSTER NODE     start one node again (its data is kept)
#   kafka.sh classpath [VERSION]    the classpath of a version's jars (for the Java tools)
#
# Clusters (all on 127.0.0.1):
#   single  Kafka 4.1.1, 1 node, port 39092            most tests
#   trio    Kafka 4.1.1, 3 nodes, ports 39101-39103    replication factor 3, failover tests;
#           node N in rack rack-N with the rack-aware replica selector (KIP-392)
#   old     Kafka 3.9.1, 1 node, port 39201            smoke run against the 3.x protocol
#   secure  Kafka 4.1.1, 1 node: 39300 PLAINTEXT (the Java tools), 39301 SASL_PLAINTEXT
#           (SCRAM-SHA-256/512 only), 39302 SSL with client certificates required, 39303
#           SASL_SSL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER); user alice / alice-secret; PEM
#           certificates made by openssl under target/kafka/secure/certs (CA ca.pem); SASL
#           sessions of SCRAM-SHA-512 on 39301 last 3 s (KIP-368 re-authentication tests)
#   kerberos  Kafka 4.1.1, 1 node: 38090 PLAINTEXT (the Java tools), 38092 SASL_PLAINTEXT with
#           GSSAPI only, advertised as localhost (service principal kafka/localhost), controller
#           38093; the realm, its KDC and the broker's keytab are tests/kerberos/kdc.sh's
#           (started first when not up); GSSAPI sessions last 3 s (KIP-368 re-authentication)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${KDIRECT_KAFKA_HOME:-$root/target/kafka}"
say() { printf '[kafka] %s\n' "$*" >&2; }
# shellcheck source=../pid.sh
. "$(dirname "${BASH_SOURCE[0]}")/../pid.sh"

version_of() { case "$1" in old) echo 3.9.1 ;; *) echo 4.1.1 ;; esac; }
nodes_of() { case "$1" in trio) echo "1 2 3" ;; *) echo 1 ;; esac; }
port_of() { # cluster node -> broker port
  case "$1" in
    single) echo 39092 ;; trio) echo $((39100 + $2)) ;; old) echo 39201 ;; secure) echo 39300 ;;
    kerberos) echo 38090 ;;
  esac
}
cport_of() { case "$1" in kerberos) echo 38093 ;; *) echo $(( $(port_of "$1" "$2") + 1000 )) ;; esac; }
bootstrap_of() {
  local c=$1 out=()
  for n in $(nodes_of "$c"); do out+=("127.0.0.1:$(port_of "$c" "$n")"); done
  (IFS=,; echo "${out[*]}")
}
up() { timeout 1 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }

jars() { # version -> lib dir, fetched once
  local v=$1 lib="$here/lib-$1"
  if [ ! -f "$lib/.complete" ]; then
    local profile=kafka4; case "$v" in 3.*) profile=kafka3 ;; esac
    say "fetching Apache Kafka $v from Maven Central into $lib"
    rm -rf "$lib"
    mvn -B -q -Dstyle.color=never -f "$here/pom.xml" -Dkafka.version="$v" -P"$profile" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$lib" >&2
    touch "$lib/.complete"
  fi
  echo "$lib"
}

node_dir() { echo "$home/$1/node$2"; }

write_config() { # cluster node
  local c=$1 n=$2 dir voters=() rf
  dir="$(node_dir "$c" "$n")"
  for m in $(nodes_of "$c"); do voters+=("$m@127.0.0.1:$(cport_of "$c" "$m")"); done
  rf=$(nodes_of "$c" | wc -w)
  mkdir -p "$dir"
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$(IFS=,; echo "${voters[*]}")
listeners=PLAINTEXT://127.0.0.1:$(port_of "$c" "$n"),CONTROLLER://127.0.0.1:$(cport_of "$c" "$n")
advertised.listeners=PLAINTEXT://127.0.0.1:$(port_of "$c" "$n")
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=1
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=0
log.cleaner.backoff.ms=500
file.delete.delay.ms=0
unclean.leader.election.enable=false
PROPS
  if [ "$c" = secure ]; then secure_config "$dir" >>"$dir/server.properties"; fi
  if [ "$c" = kerberos ]; then kerberos_config >>"$dir/server.properties"; fi
  # trio: one rack per node and the rack-aware replica selector, for fetching from the closest
  # replica (KIP-392); clients that send no rack still read from the leader.
  if [ "$c" = trio ]; then
    printf 'broker.rack=rack-%s\nreplica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector\n' \
      "$n" >>"$dir/server.properties"
  fi
  cat > "$dir/log4j2.properties" <<PROPS
status=warn
appender.file.type=File
appender.file.name=file
appender.file.fileName=$dir/server.log
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.state.name=state.change.logger
logger.state.level=WARN
PROPS
  cat > "$dir/log4j.properties" <<PROPS
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$dir/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
PROPS
}

certs_dir() { echo "$home/secure/certs"; }

make_certs() { # a CA, the broker's certificate (localhost, 127.0.0.1) and client certificates
  local d; d="$(certs_dir)"
  mkdir -p "$d"
  if ! command -v openssl >/dev/null; then
    say "installing the openssl command (Debian) to make the test certificates"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  fi
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 3650 \
      -subj /CN=kdirect-test-ca -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
    sign() { # name subject-alt-names usage
      openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
      printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n%s\n' "$3" "$2" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
        -out "$1.pem" -extfile "$1.ext"
    }
    # The broker: PKCS#8 key, certificate, CA, in one PEM key store (KIP-651).
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out broker.key
    sign broker 'subjectAltName=DNS:localhost,IP:127.0.0.1' serverAuth
    cat broker.key broker.pem ca.pem >broker-keystore.pem
    # Clients: an RSA key as PKCS#8 (client.key) and PKCS#1 (client-rsa.key); an EC key as SEC1.
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out client.key
    sign client '' clientAuth
    openssl pkey -in client.key -traditional -out client-rsa.key 2>/dev/null \
      || openssl rsa -in client.key -traditional -out client-rsa.key
    openssl ecparam -name prime256v1 -genkey -noout -out client-ec.key
    sign client-ec '' clientAuth
    # A CA the broker does not trust, with a client certificate of its own.
    openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 3650 \
      -subj /CN=other-ca -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
  ) >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; return 1; }
}

secure_config() { # node dir -> the secure cluster's listeners (appended: later keys win)
  local d; d="$(certs_dir)"
  local jaas_scram='org.apache.kafka.common.security.scram.ScramLoginModule required;'
  local jaas_plain='org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
  local jaas_oauth='org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;'
  cat <<PROPS
listeners=PLAINTEXT://127.0.0.1:39300,SASL_PLAINTEXT://127.0.0.1:39301,SSL://127.0.0.1:39302,SASL_SSL://127.0.0.1:39303,CONTROLLER://127.0.0.1:40300
advertised.listeners=PLAINTEXT://127.0.0.1:39300,SASL_PLAINTEXT://127.0.0.1:39301,SSL://127.0.0.1:39302,SASL_SSL://127.0.0.1:39303
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
ssl.keystore.type=PEM
ssl.keystore.location=$d/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$d/ca.pem
listener.name.ssl.ssl.client.auth=required
listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=$jaas_scram
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$jaas_scram
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.plain.sasl.jaas.config=$jaas_plain
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$jaas_scram
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$jaas_scram
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=$jaas_oauth
connections.max.reauth.ms=3600000
listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms=3000
PROPS
}

kerberos_home() { echo "${KDIRECT_KERBEROS_HOME:-$root/target/kerberos}"; }

kerberos_config() { # the kerberos cluster's listeners (appended: later keys win)
  local k; k="$(kerberos_home)"
  cat <<PROPS
listeners=PLAINTEXT://127.0.0.1:38090,SASL_PLAINTEXT://127.0.0.1:38092,CONTROLLER://127.0.0.1:38093
advertised.listeners=PLAINTEXT://127.0.0.1:38090,SASL_PLAINTEXT://localhost:38092
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
listener.name.sasl_plaintext.sasl.enabled.mechanisms=GSSAPI
sasl.kerberos.service.name=kafka
listener.name.sasl_plaintext.gssapi.sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="$k/broker.keytab" principal="kafka/localhost@KDIRECT.TEST";
connections.max.reauth.ms=3600000
listener.name.sasl_plaintext.gssapi.connections.max.reauth.ms=3000
PROPS
}

java_opts() { # node dir
  local krb=
  # The kerberos cluster's JVM reads the test realm's krb5.conf, not the system's.
  case "$1" in "$home/kerberos/"*) krb="-Djava.security.krb5.conf=$(kerberos_home)/krb5.conf" ;; esac
  echo "-Xms256m -Xmx768m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
-Dlog4j2.configurationFile=$1/log4j2.properties -Dlog4j.configuration=file:$1/log4j.properties $krb"
}

format_cluster() { # cluster: fresh data dirs, one cluster id
  local c=$1 lib id
  lib="$(jars "$(version_of "$c")")"
  rm -rf "${home:?}/$c"
  local scram=()
  if [ "$c" = secure ]; then
    make_certs
    scram=(--add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'
      --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]')
  fi
  for n in $(nodes_of "$c"); do write_config "$c" "$n"; done
  id="$(java -cp "$lib/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)"
  for n in $(nodes_of "$c"); do
    local dir; dir="$(node_dir "$c" "$n")"
    # shellcheck disable=SC2046
    java $(java_opts "$dir") -cp "$lib/*" kafka.tools.StorageTool format -t "$id" \
      -c "$dir/server.properties" --ignore-formatted "${scram[@]}" >"$dir/format.log" 2>&1 \
      || { cat "$dir/format.log" >&2; return 1; }
  done
}

start_node() { # cluster node
  local c=$1 n=$2 lib dir
  lib="$(jars "$(version_of "$c")")"
  dir="$(node_dir "$c" "$n")"
  [ -f "$dir/server.properties" ] || { say "no node $c/$n: run 'kafka.sh up' first"; return 1; }
  if live_pid "$dir/pid" "$dir/server.properties" >/dev/null; then return 0; fi
  # shellcheck disable=SC2046
  : >"$dir/server.log"
  nohup java $(java_opts "$dir") -cp "$lib/*" kafka.Kafka "$dir/server.properties" \
    >"$dir/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
}

holder() { # port -> the process listening on it, as far as this machine says
  if command -v ss >/dev/null; then
    ss -ltnpH "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | while IFS='=' read -r _ pid; do
      printf 'pid %s: %s' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-200)"
    done
  else
    echo "(no 'ss' to say which)"
  fi
}

show_logs() { # cluster: the tail of each node's logs, to say why it did not come up
  local c=$1
  for n in $(nodes_of "$c"); do
    say "--- $c node $n: server.log, its first errors ---"
    grep -m 8 -E ' (ERROR|FATAL) |Exception' "$(node_dir "$c" "$n")/server.log" >&2 2>/dev/null || true
    say "--- $c node $n: server.log (last 40 lines) ---"
    tail -40 "$(node_dir "$c" "$n")/server.log" >&2 2>/dev/null || true
    say "--- $c node $n: stdout.log (last 15 lines) ---"
    tail -15 "$(node_dir "$c" "$n")/stdout.log" >&2 2>/dev/null || true
  done
}

wait_ready() { # cluster: every broker port answers, then the cluster serves metadata
  local c=$1 limit=${KDIRECT_KAFKA_START_LIMIT:-180} deadline
  deadline=$((SECONDS + limit))
  for n in $(nodes_of "$c"); do
    until up "$(port_of "$c" "$n")"; do
      if ! live_pid "$(node_dir "$c" "$n")/pid" "$(node_dir "$c" "$n")/server.properties" >/dev/null; then
        say "$c node $n exited before it opened port $(port_of "$c" "$n")"
        return 1
      fi
      if ((SECONDS > deadline)); then
        say "$c node $n did not open port $(port_of "$c" "$n") in $limit s"
        return 1
      fi
      sleep 0.5
    done
  done
  # A broker port opens before the broker has caught up with the controller: its log says
  # "Kafka Server started" once it serves.
  for n in $(nodes_of "$c"); do
    until grep -q 'Kafka Server started' "$(node_dir "$c" "$n")/server.log" 2>/dev/null; do
      # Its port answered, but not from this node: another process holds it.
      if ! live_pid "$(node_dir "$c" "$n")/pid" "$(node_dir "$c" "$n")/server.properties" >/dev/null; then
        say "$c node $n exited; port $(port_of "$c" "$n") answers for another process: $(holder "$(port_of "$c" "$n")")"
        return 1
      fi
      if ((SECONDS > deadline)); then say "$c node $n never logged 'Kafka Server started' in $limit s"; return 1; fi
      sleep 0.5
    done
  done
}

cluster_up() { # cluster
  local c=$1 all=1
  for n in $(nodes_of "$c"); do up "$(port_of "$c" "$n")" || all=; done
  if [ -n "$all" ]; then say "$c already up at $(bootstrap_of "$c")"; return 0; fi
  # The broker logs in with its keytab at start-up: the realm and its KDC come first.
  if [ "$c" = kerberos ]; then bash "$here/../kerberos/kdc.sh" up; fi
  # Part of the cluster answers: a node of ours still running is left alone (start_node skips
  # it); a port held by anything else would take the new node's place, so say who holds it.
  for n in $(nodes_of "$c"); do
    local dir; dir="$(node_dir "$c" "$n")"
    if up "$(port_of "$c" "$n")" && ! live_pid "$dir/pid" "$dir/server.properties" >/dev/null; then
      say "FAIL: port $(port_of "$c" "$n") of $c node $n is held by another process: $(holder "$(port_of "$c" "$n")")"
      return 1
    fi
  done
  if [ ! -f "$(node_dir "$c" 1)/data/meta.properties" ]; then format_cluster "$c"; fi
  for n in $(nodes_of "$c"); do start_node "$c" "$n"; done
  if ! wait_ready "$c"; then
    # Said why, then once more from fresh data dirs: a loaded machine (CI starts every service
    # at once on two cores) once left a trio node short of 'started' (stop 30).
    show_logs "$c"
    say "$c: stopping its nodes and starting it again from fresh data dirs"
    for n in $(nodes_of "$c"); do stop_node "$c" "$n" KILL; done
    format_cluster "$c"
    for n in $(nodes_of "$c"); do start_node "$c" "$n"; done
    wait_ready "$c" || { show_logs "$c"; say "FAIL: $c did not come up twice"; return 1; }
  fi
  say "$c up at $(bootstrap_of "$c") (Kafka $(version_of "$c"))"
}

stop_node() { # cluster node signal
  local dir pid
  dir="$(node_dir "$1" "$2")"
  pid="$(live_pid "$dir/pid" "$dir/server.properties")" || { rm -f "$dir/pid"; return 0; }
  kill "-$3" "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/pid"
}

tool() { # compile KTool.java (the Java producer/consumer/admin of the tests) when it changed
  local lib; lib="$(jars "$(version_of single)")"
  if [ ! -f "$home/tool/KTool.class" ] || [ "$here/KTool.java" -nt "$home/tool/KTool.class" ]; then
    mkdir -p "$home/tool"
    javac -nowarn -cp "$lib/*" -d "$home/tool" "$here/KTool.java" >&2
  fi
}

clusters="${KDIRECT_KAFKA_CLUSTERS:-single trio old secure kerberos}"
case "${1:-}" in
  up)
    if [ $# -gt 1 ]; then shift; clusters="$*"; fi
    mkdir -p "$home"
    for c in $clusters; do jars "$(version_of "$c")" >/dev/null; done
    tool
    for c in $clusters; do cluster_up "$c"; done ;;
  down)
    clusters="single trio old secure kerberos"
    if [ $# -gt 1 ]; then shift; clusters="$*"; fi
    for c in $clusters; do for n in $(nodes_of "$c"); do stop_node "$c" "$n" TERM; done; done ;;
  is-up)
    for n in $(nodes_of "$2"); do up "$(port_of "$2" "$n")" || exit 1; done ;;
  env)
    echo "export KDIRECT_TEST_KAFKA=$(bootstrap_of single)"
    echo "export KDIRECT_TEST_KAFKA_TRIO=$(bootstrap_of trio)"
    echo "export KDIRECT_TEST_KAFKA_OLD=$(bootstrap_of old)"
    # The secure cluster: its PLAINTEXT port (for the Java tools), its secured ports, the CA.
    echo "export KDIRECT_TEST_KAFKA_SECURE=$(bootstrap_of secure)"
    echo "export KDIRECT_TEST_KAFKA_SASL_PLAINTEXT=127.0.0.1:39301"
    echo "export KDIRECT_TEST_KAFKA_SSL=127.0.0.1:39302"
    echo "export KDIRECT_TEST_KAFKA_SASL_SSL=127.0.0.1:39303"
    echo "export KDIRECT_TEST_KAFKA_CERTS=$(certs_dir)"
    # The kerberos cluster: its PLAINTEXT port (for the Java tools), its GSSAPI listener.
    echo "export KDIRECT_TEST_KAFKA_KERBEROS=$(bootstrap_of kerberos)"
    echo "export KDIRECT_TEST_KAFKA_GSSAPI=localhost:38092"
    echo "export KDIRECT_TEST_KAFKA_CP='$home/tool:$here/lib-$(version_of single)/*'"
    echo "export KDIRECT_TEST_KAFKA_SCRIPT=$here/kafka.sh" ;;
  stop) stop_node "$2" "$3" TERM ;;
  kill) stop_node "$2" "$3" KILL ;;
  start) start_node "$2" "$3"; up_deadline=$((SECONDS + 90))
    until up "$(port_of "$2" "$3")"; do ((SECONDS < up_deadline)) || exit 1; sleep 0.25; done ;;
  classpath) echo "$(jars "${2:-$(version_of single)}")/*" ;;
  *) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
