#!/usr/bin/env bash
# HDFS on loopback for the HDFS checkpoint's tests: Hadoop's MiniDFSCluster (a NameNode and one
# DataNode in one JVM, tests/hdfs/MiniHdfs.java), the NameNode's RPC on 39540, data under
# $KDIRECT_HDFS_HOME (default target/hdfs), from Maven Central jars (tests/hdfs/pom.xml).
#
#   hdfs.sh up      fetch jars and compile the launcher if missing; start HDFS unless answering
#   hdfs.sh down    stop it
#   hdfs.sh env     print the variable the tests read (KDIRECT_TEST_HDFS)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${KDIRECT_HDFS_HOME:-$root/target/hdfs}"
version=3.4.1
port=39540
say() { printf '[hdfs] %s\n' "$*" >&2; }
# shellcheck source=../pid.sh
. "$(dirname "${BASH_SOURCE[0]}")/../pid.sh"
up() { timeout 1 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }

jars() {
  local lib="$here/lib-$version"
  if [ ! -f "$lib/.complete" ]; then
    say "fetching Apache Hadoop $version's MiniDFSCluster from Maven Central into $lib"
    rm -rf "$lib"
    mvn -B -q -Dstyle.color=never -f "$here/pom.xml" -Dhadoop.version="$version" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$lib" >&2
    touch "$lib/.complete"
  fi
  echo "$lib"
}

# The launcher, compiled beside the jars (again when its source changes).
launcher() {
  local lib=$1 classes="$1/classes"
  if [ ! -f "$classes/MiniHdfs.class" ] || [ "$here/MiniHdfs.java" -nt "$classes/MiniHdfs.class" ]; then
    mkdir -p "$classes"
    javac -nowarn -d "$classes" -cp "$lib/*" "$here/MiniHdfs.java" >&2
  fi
  echo "$classes"
}

opens=(--add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED
  --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED
  --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-opens java.base/java.io=ALL-UNNAMED)

start() {
  if up "$port"; then
    say "HDFS already answering on 127.0.0.1:$port"
    return 0
  fi
  local lib classes; lib="$(jars)"; classes="$(launcher "$lib")"
  mkdir -p "$home"
  say "starting HDFS $version (MiniDFSCluster) under $home"
  local t0=$SECONDS
  nohup java -Xmx512m "${opens[@]}" -cp "$lib/*:$classes" MiniHdfs "$port" "$home/data" \
    > "$home/hdfs.log" 2>&1 &
  echo $! > "$home/hdfs.pid"
  # Up when the launcher says so: the NameNode is out of safe mode and the DataNode registered.
  for _ in $(seq 1 120); do
    if grep -q '^ready ' "$home/hdfs.log" 2>/dev/null; then
      say "HDFS up at hdfs://127.0.0.1:$port after $((SECONDS - t0)) s"
      return 0
    fi
    if ! kill -0 "$(cat "$home/hdfs.pid")" 2>/dev/null; then break; fi
    sleep 1
  done
  say "FAIL: HDFS is not up on 127.0.0.1:$port (log: $home/hdfs.log)"
  grep -v '^[[:space:]]*at ' "$home/hdfs.log" | tail -20 >&2 || true
  return 1
}

case "${1:-}" in
  up) start ;;
  down)
    pid="$(live_pid "$home/hdfs.pid" "$home/data")" && kill "$pid" 2>/dev/null
    rm -f "$home/hdfs.pid" ;;
  env) echo "export KDIRECT_TEST_HDFS=hdfs://127.0.0.1:$port" ;;
  *) echo "usage: hdfs.sh up|down|env" >&2; exit 2 ;;
esac
