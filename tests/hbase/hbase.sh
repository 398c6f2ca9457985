#!/usr/bin/env bash
# Apache HBase on loopback for the HBase store's tests: standalone mode (master, region server
# and HBase's own ZooKeeper on 39510 in one JVM, data under $KDIRECT_HBASE_HOME, default
# target/hbase) and the REST gateway on 39530, from Maven Central jars (tests/hbase/pom.xml).
#
#   hbase.sh up        fetch jars if missing; start HBase and its REST gateways unless answering
#   hbase.sh down      stop them all
#   hbase.sh down tls  stop only the HTTPS gateway
#
# A second REST gateway serves HTTPS on 39531 (hbase.rest.ssl.enabled) when tests/services.sh
# made the test certificate's PKCS#12 keystore ($KDIRECT_TEST_TLS_DIR/hbase-rest.p12), for the
# store's hbases:// tests.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${KDIRECT_HBASE_HOME:-$root/target/hbase}"
version=2.6.1
rest_port=39530
rest_tls_port=39531
tls_dir="${KDIRECT_TEST_TLS_DIR:-/etc/kdirect-test-tls}"
say() { printf '[hbase] %s\n' "$*" >&2; }
# shellcheck source=../pid.sh
. "$(dirname "${BASH_SOURCE[0]}")/../pid.sh"
up() { timeout 1 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }

jars() {
  local lib="$here/lib-$version"
  if [ ! -f "$lib/.complete" ]; then
    say "fetching Apache HBase $version from Maven Central into $lib"
    rm -rf "$lib"
    mvn -B -q -Dstyle.color=never -f "$here/pom.xml" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$lib" >&2
    # Hadoop 2's servlet 2.5, Jetty 6 and Jersey 1 beside HBase's shaded Jetty 9 and Jersey 2:
    # the REST gateway fails on the old servlet API (HBase's own tarball leaves them out too).
    rm -f "$lib"/servlet-api-2.5.jar "$lib"/jetty-6.1.26.jar "$lib"/jetty-util-6.1.26.jar \
      "$lib"/jetty-sslengine-6.1.26.jar "$lib"/jersey-*-1.9.jar
    touch "$lib/.complete"
  fi
  echo "$lib"
}

config() {
  mkdir -p "$home/conf" "$home/data"
  cat > "$home/conf/hbase-site.xml" <<XML
<?xml version="1.0"?>
<configuration>
<property><name>hbase.cluster.distributed</name><value>false</value></property>
<property><name>hbase.rootdir</name><value>file://$home/data/root</value></property>
<property><name>hbase.tmp.dir</name><value>$home/data/tmp</value></property>
<property><name>hbase.zookeeper.property.dataDir</name><value>$home/data/zk</value></property>
<property><name>hbase.zookeeper.quorum</name><value>127.0.0.1</value></property>
<property><name>hbase.zookeeper.property.clientPort</name><value>39510</value></property>
<property><name>hbase.master.port</name><value>39520</value></property>
<property><name>hbase.master.info.port</name><value>-1</value></property>
<property><name>hbase.regionserver.port</name><value>39521</value></property>
<property><name>hbase.regionserver.info.port</name><value>-1</value></property>
<property><name>hbase.master.hostname</name><value>127.0.0.1</value></property>
<property><name>hbase.regionserver.hostname</name><value>127.0.0.1</value></property>
<property><name>hbase.unsafe.stream.capability.enforce</name><value>false</value></property>
<property><name>hbase.rest.info.port</name><value>-1</value></property>
</configuration>
XML
  # The HTTPS gateway's configuration: the same, with TLS.
  mkdir -p "$home/conf-tls"
  sed 's|</configuration>||' "$home/conf/hbase-site.xml" > "$home/conf-tls/hbase-site.xml"
  cat >> "$home/conf-tls/hbase-site.xml" <<XML
<property><name>hbase.rest.ssl.enabled</name><value>true</value></property>
<property><name>hbase.rest.ssl.keystore.store</name><value>$tls_dir/hbase-rest.p12</value></property>
<property><name>hbase.rest.ssl.keystore.type</name><value>PKCS12</value></property>
<property><name>hbase.rest.ssl.keystore.password</name><value>kdirect-test</value></property>
<property><name>hbase.rest.ssl.keystore.keypassword</name><value>kdirect-test</value></property>
</configuration>
XML
  printf 'log4j.rootLogger=WARN,c\nlog4j.appender.c=org.apache.log4j.ConsoleAppender\nlog4j.appender.c.layout=org.apache.log4j.PatternLayout\nlog4j.appender.c.layout.ConversionPattern=%%d %%p %%c{1}: %%m%%n\n' \
    > "$home/conf/log4j.properties"
  cp "$home/conf/log4j.properties" "$home/conf-tls/"
}

opens=(--add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-opens java.base/java.io=ALL-UNNAMED)

start() {
  local lib; lib="$(jars)"
  config
  local cp="$home/conf:$lib/*"
  if ! up 39520; then
    say "starting HBase $version (standalone) under $home"
    nohup java -Xmx512m "${opens[@]}" -cp "$cp" org.apache.hadoop.hbase.master.HMaster start \
      > "$home/master.log" 2>&1 &
    echo $! > "$home/master.pid"
  fi
  if ! up "$rest_port"; then
    nohup java -Xmx256m "${opens[@]}" -cp "$cp" org.apache.hadoop.hbase.rest.RESTServer \
      -p "$rest_port" start > "$home/rest.log" 2>&1 &
    echo $! > "$home/rest.pid"
  fi
  local tls=
  if [ -s "$tls_dir/hbase-rest.p12" ]; then tls=1; fi
  if [ -n "$tls" ] && ! up "$rest_tls_port"; then
    nohup java -Xmx256m "${opens[@]}" -cp "$home/conf-tls:$lib/*" \
      org.apache.hadoop.hbase.rest.RESTServer -p "$rest_tls_port" start \
      > "$home/rest-tls.log" 2>&1 &
    echo $! > "$home/rest-tls.pid"
  fi
  # Up when the REST gateway answers for the cluster (the master has a region server).
  for _ in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$rest_port/version/cluster" >/dev/null 2>&1 \
      && curl -sf "http://127.0.0.1:$rest_port/status/cluster" 2>/dev/null | grep -q '1 live' \
      && { [ -z "$tls" ] || curl -sf --cacert "$tls_dir/ca.pem" \
        "https://127.0.0.1:$rest_tls_port/version/cluster" >/dev/null 2>&1; }; then
      say "HBase up, REST gateway at 127.0.0.1:$rest_port${tls:+, HTTPS at 127.0.0.1:$rest_tls_port}"
      return 0
    fi
    sleep 1
  done
  say "FAIL: HBase's REST gateway is not answering on 127.0.0.1:$rest_port after 120 s"
  tail -20 "$home/master.log" "$home/rest.log" >&2 || true
  [ -z "$tls" ] || tail -20 "$home/rest-tls.log" >&2 || true
  return 1
}

case "${1:-}" in
  up) start ;;
  down)
    gateways="rest-tls rest master"
    if [ "${2:-}" = tls ]; then gateways=rest-tls; fi
    for p in $gateways; do
      pid="$(live_pid "$home/$p.pid" "$home/conf")" && kill "$pid" 2>/dev/null
      rm -f "$home/$p.pid"
    done ;;
  *) echo "usage: hbase.sh up|down [tls]" >&2; exit 2 ;;
esac
