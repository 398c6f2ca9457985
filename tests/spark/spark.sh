#!/usr/bin/env bash
# Apache Spark for the `kdirect offsets import-spark` test and the Delta tests
# (tests/it/spark.rs) and the lakehouse benchmark (benches/e2e.rs --suite lakehouse): Spark's
# own jars from Maven Central (tests/spark/pom.xml: spark-sql, spark-sql-kafka-0-10 and
# delta-spark, Scala 2.13), fetched once into tests/spark/lib-<version>-delta-<version>/
# (git-ignored), and SparkCheckpoint.java and SparkDelta.java compiled against them into
# $KDIRECT_SPARK_HOME (default target/spark). Spark runs in local mode inside one JVM; no
# cluster, no daemon.
#
#   spark.sh fetch                 fetch the jars if missing, compile the programs if changed
#   spark.sh env                   print KDIRECT_TEST_SPARK (this script) to export
#   spark.sh run ARGS...           java SparkCheckpoint ARGS... (see SparkCheckpoint.java)
#   spark.sh delta ARGS...         java SparkDelta ARGS... (see SparkDelta.java)
#
# The JVM's options are $KDIRECT_SPARK_JVM_OPTS (default: a 512 MiB heap, the serial collector
# and C1 only, which start fastest for the tests' small jobs), followed by the --add-opens list
# Spark's own launcher passes on Java 17.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${KDIRECT_SPARK_HOME:-$root/target/spark}"
version=3.5.4 # spark-sql-kafka-0-10 needs spark-token-provider-kafka-0-10 of the same version
delta=3.3.2   # delta-spark 3.3: the last line built on Spark 3.5
lib="$here/lib-$version-delta-$delta"
say() { printf '[spark] %s\n' "$*" >&2; }

fetch() {
  if [ ! -f "$lib/.complete" ]; then
    say "fetching Apache Spark $version and delta-spark $delta from Maven Central into $lib"
    rm -rf "$lib"
    # settings.xml: Spark's POMs name Google's mirror of Central first; use Central.
    mvn -B -q -Dstyle.color=never -s "$here/settings.xml" -f "$here/pom.xml" \
      -Dspark.version="$version" -Ddelta.version="$delta" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$lib" >&2
    touch "$lib/.complete"
  fi
  for program in SparkCheckpoint SparkDelta; do
    if [ ! -f "$home/classes/$program.class" ] ||
       [ "$here/$program.java" -nt "$home/classes/$program.class" ]; then
      mkdir -p "$home/classes"
      javac -nowarn -cp "$lib/*" -d "$home/classes" "$here/$program.java" >&2
    fi
  done
}

java_main() {
  local main="$1"
  shift
  fetch
  # Spark 3.5 on Java 17 needs these (Spark's own launcher adds the same list,
  # JavaModuleOptions); the log4j2 file keeps Spark's INFO lines off stderr.
  # shellcheck disable=SC2086 # the options are words
  exec java ${KDIRECT_SPARK_JVM_OPTS:--Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    -XX:+IgnoreUnrecognizedVMOptions \
    --add-opens=java.base/java.lang=ALL-UNNAMED \
    --add-opens=java.base/java.lang.invoke=ALL-UNNAMED \
    --add-opens=java.base/java.lang.reflect=ALL-UNNAMED \
    --add-opens=java.base/java.io=ALL-UNNAMED \
    --add-opens=java.base/java.net=ALL-UNNAMED \
    --add-opens=java.base/java.nio=ALL-UNNAMED \
    --add-opens=java.base/java.util=ALL-UNNAMED \
    --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
    --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED \
    --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED \
    --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
    --add-opens=java.base/sun.nio.cs=ALL-UNNAMED \
    --add-opens=java.base/sun.security.action=ALL-UNNAMED \
    --add-opens=java.base/sun.util.calendar=ALL-UNNAMED \
    -Djdk.reflect.useDirectMethodHandle=false \
    -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -cp "$home/classes:$lib/*" "$main" "$@"
}

case "${1:-}" in
  fetch) fetch ;;
  env) echo "export KDIRECT_TEST_SPARK=$here/spark.sh" ;;
  run) shift; java_main SparkCheckpoint "$@" ;;
  delta) shift; java_main SparkDelta "$@" ;;
  *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
