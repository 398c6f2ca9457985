#!/usr/bin/env bash
# Apache Spark for the `kdirect offsets import-spark` test (tests/it/spark.rs): Spark's own
# jars from Maven Central (tests/spark/pom.xml: spark-sql and spark-sql-kafka-0-10, Scala
# 2.13), fetched once into tests/spark/lib-<version>/ (git-ignored), and SparkCheckpoint.java
# compiled against them into $KDIRECT_SPARK_HOME (default target/spark). Spark runs in local
# mode inside one JVM; no cluster, no daemon.
#
#   spark.sh fetch                 fetch the jars if missing, compile SparkCheckpoint if changed
#   spark.sh env                   print KDIRECT_TEST_SPARK (this script) to export
#   spark.sh run ARGS...           java SparkCheckpoint ARGS... (see SparkCheckpoint.java)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${KDIRECT_SPARK_HOME:-$root/target/spark}"
version=3.5.4 # spark-sql-kafka-0-10 needs spark-token-provider-kafka-0-10 of the same version
lib="$here/lib-$version"
say() { printf '[spark] %s\n' "$*" >&2; }

fetch() {
  if [ ! -f "$lib/.complete" ]; then
    say "fetching Apache Spark $version from Maven Central into $lib"
    rm -rf "$lib"
    # settings.xml: Spark's POMs name Google's mirror of Central first; use Central.
    mvn -B -q -Dstyle.color=never -s "$here/settings.xml" -f "$here/pom.xml" \
      -Dspark.version="$version" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$lib" >&2
    touch "$lib/.complete"
  fi
  if [ ! -f "$home/classes/SparkCheckpoint.class" ] ||
     [ "$here/SparkCheckpoint.java" -nt "$home/classes/SparkCheckpoint.class" ]; then
    mkdir -p "$home/classes"
    javac -nowarn -cp "$lib/*" -d "$home/classes" "$here/SparkCheckpoint.java" >&2
  fi
}

case "${1:-}" in
  fetch) fetch ;;
  env) echo "export KDIRECT_TEST_SPARK=$here/spark.sh" ;;
  run)
    shift
    fetch
    # Spark 3.5 on Java 17 needs these (Spark's own launcher adds the same list,
    # JavaModuleOptions); the log4j2 file keeps Spark's INFO lines off stderr.
    exec java -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
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
      -cp "$home/classes:$lib/*" SparkCheckpoint "$@" ;;
  *) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
