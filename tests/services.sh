#!/usr/bin/env bash
# Installs (from Debian, when missing) and starts the services the tests talk to, on loopback:
# PostgreSQL, MariaDB, Redis, ZooKeeper, an S3-compatible server (moto), Azure Blob's emulator
# (Azurite), Apache HBase, HDFS
# (tests/hdfs/hdfs.sh: Hadoop's MiniDFSCluster), an MIT Kerberos KDC (tests/kerberos/kdc.sh) and
# Apache Kafka (tests/kafka/kafka.sh, a Kerberized node among its clusters), installs
# pyarrow (a venv in target/pyarrow, the Parquet sink's independent reader), and fetches Apache Spark
# (tests/spark/spark.sh: jars only; the Spark test runs it in local mode). Idempotent: a service
# already answering is left alone. Meant to be sourced by tests/run (it exports the
# KDIRECT_TEST_* variables the tests read); `bash tests/services.sh` alone starts them and
# prints the variables to export.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

say() { printf '[services] %s\n' "$*" >&2; }
up() { timeout 1 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }
wait_up() {
  local port=$1 what=$2
  for _ in $(seq 1 60); do up "$port" && return 0; sleep 1; done
  say "FAIL: $what is not listening on 127.0.0.1:$port after 60 s"; return 1
}
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# What this script starts (not what it finds running) is listed, one service a line, in the
# file KDIRECT_SERVICES_STARTED names (tests/run.sh sets it, and stops exactly those with
# tests/stop-services.sh when the tests end).
started() { if [ -n "${KDIRECT_SERVICES_STARTED:-}" ]; then echo "$*" >> "$KDIRECT_SERVICES_STARTED"; fi; }

# Every service here listens on a fixed port in 39000-40999 (Kafka's brokers and controllers,
# ZooKeeper, HBase, HDFS, moto, Azurite), which is inside Linux's ephemeral range (32768-60999):
# an outgoing connection that happens to get one of them as its local port makes the service
# that owns it fail to bind (the likely cause of a trio node that stopped seconds after it
# started, in CI). Reserved, the kernel no longer hands them out to outgoing connections;
# binding them stays allowed.
# The Kerberos KDC and the Kerberized Kafka node (38088-38093) are reserved the same way.
reserved=/proc/sys/net/ipv4/ip_local_reserved_ports
for range in 39000-40999 38088-38093; do
  if [ -f "$reserved" ] && ! grep -q "$range" "$reserved"; then
    ports="$(cat "$reserved")"
    ports="${ports:+$ports,}$range"
    if { [ "$(id -u)" = 0 ] && echo "$ports" >"$reserved"; } 2>/dev/null \
      || { command -v sudo >/dev/null && echo "$ports" | sudo -n tee "$reserved" >/dev/null 2>&1; }; then
      say "reserved ports $range (ip_local_reserved_ports): outgoing connections no longer take them"
    else
      say "could not reserve ports $range (ip_local_reserved_ports): a service may find its port taken"
    fi
  fi
done

apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq >&2; apt_updated=1; fi
  say "installing $* from Debian"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

# --- TLS for the stores: a test CA, a server certificate (localhost, 127.0.0.1, ::1) and a
# client certificate, made with the openssl command (nothing links OpenSSL) and kept under /etc
# so the servers' configurations that name them outlive any clone. PostgreSQL, MariaDB and the
# TLS Redis below serve the server certificate; the tests trust ca.pem (KDIRECT_TEST_TLS_CA)
# and present client.pem (a test-only key, readable by all) where the TLS Redis asks for one.
tls_dir="${KDIRECT_TEST_TLS_DIR:-/etc/kdirect-test-tls}"
tls_new=
if ! as_root test -s "$tls_dir/ca.key"; then
  command -v openssl >/dev/null || apt_install openssl
  tls_tmp="$(mktemp -d)"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kdirect test CA" \
    -keyout "$tls_tmp/ca.key" -out "$tls_tmp/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$tls_tmp/server.key" -out "$tls_tmp/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" > "$tls_tmp/ext"
  openssl x509 -req -in "$tls_tmp/server.csr" -CA "$tls_tmp/ca.pem" -CAkey "$tls_tmp/ca.key" \
    -CAcreateserial -days 3650 -extfile "$tls_tmp/ext" -out "$tls_tmp/server.pem" 2>/dev/null
  as_root mkdir -p "$tls_dir"
  as_root rm -f "$tls_dir/client.key" "$tls_dir/client.pem"
  as_root install -m 644 "$tls_tmp/ca.pem" "$tls_tmp/server.pem" "$tls_dir/"
  as_root install -m 600 "$tls_tmp/ca.key" "$tls_tmp/server.key" "$tls_dir/"
  rm -rf "$tls_tmp"
  tls_new=1
  say "made a test CA and a server certificate for localhost in $tls_dir"
fi
if ! test -s "$tls_dir/client.key"; then
  tls_tmp="$(mktemp -d)"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kdirect test client" \
    -keyout "$tls_tmp/client.key" -out "$tls_tmp/client.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=clientAuth" > "$tls_tmp/ext"
  as_root openssl x509 -req -in "$tls_tmp/client.csr" -CA "$tls_dir/ca.pem" \
    -CAkey "$tls_dir/ca.key" -CAcreateserial -CAserial "$tls_tmp/ca.srl" -days 3650 \
    -extfile "$tls_tmp/ext" -out "$tls_tmp/client.pem" 2>/dev/null
  as_root install -m 644 "$tls_tmp/client.pem" "$tls_tmp/client.key" "$tls_dir/"
  as_root rm -rf "$tls_tmp"
fi
# The HBase REST gateway's keystore (PKCS#12, the server certificate and key; a test-only
# password): tests/hbase/hbase.sh serves HTTPS on 39531 with it.
if [ -n "$tls_new" ] || ! test -s "$tls_dir/hbase-rest.p12"; then
  as_root openssl pkcs12 -export -in "$tls_dir/server.pem" -inkey "$tls_dir/server.key" \
    -certfile "$tls_dir/ca.pem" -name rest -passout pass:kdirect-test \
    -out "$tls_dir/hbase-rest.p12"
  as_root chmod 644 "$tls_dir/hbase-rest.p12"
fi

# --- PostgreSQL: cluster from the Debian package, password login over TCP -----------------
pg_password=kdirect
if ! command -v pg_ctlcluster >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt_install postgresql
fi
if ! up 5432; then
  ver="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)"
  if [ -z "$ver" ]; then
    ver="$(ls /usr/lib/postgresql | sort -V | tail -1)"
    as_root pg_createcluster "$ver" main >&2
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start >&2 || true
  started postgres "$ver"
  wait_up 5432 PostgreSQL
fi
# TLS with the test certificate (sslmode=require / verify-full); clear-text logins still work
# (pg_hba's `host` lines take both). A reload, not a restart: sessions in progress go on.
pg_key="$tls_dir/postgres.key"
if [ -n "$tls_new" ] || ! as_root test -s "$pg_key"; then
  as_root install -m 600 -o postgres -g postgres "$tls_dir/server.key" "$pg_key"
fi
if [ -n "$tls_new" ] \
  || [ "$(as_root su postgres -c "psql -tAc 'SHOW ssl_cert_file'")" != "$tls_dir/server.pem" ]; then
  as_root su postgres -c "psql -q -v ON_ERROR_STOP=1 -c \"ALTER SYSTEM SET ssl = on\" \
    -c \"ALTER SYSTEM SET ssl_cert_file = '$tls_dir/server.pem'\" \
    -c \"ALTER SYSTEM SET ssl_key_file = '$pg_key'\" -c 'SELECT pg_reload_conf()'" >/dev/null
  say "PostgreSQL serves TLS with $tls_dir/server.pem"
fi
as_root su postgres -c "psql -q -v ON_ERROR_STOP=1 -c \"ALTER USER postgres PASSWORD '$pg_password'\"" >/dev/null
if ! as_root su postgres -c "psql -tAc \"SELECT 1 FROM pg_database WHERE datname='kdirect_test'\"" | grep -q 1; then
  as_root su postgres -c "createdb kdirect_test"
fi

# --- MariaDB: a password user for TCP logins ---------------------------------------------
if ! command -v mariadbd >/dev/null; then apt_install mariadb-server; fi
# TLS with the test certificate (ssl-mode=REQUIRED / VERIFY_IDENTITY), read at start-up only:
# a server already running without it is restarted once. Clear-text logins still work.
mysql_key="$tls_dir/mysql.key"
mysql_tls_cnf=/etc/mysql/mariadb.conf.d/99-kdirect-test-tls.cnf
if [ -n "$tls_new" ] || ! as_root test -s "$mysql_key"; then
  as_root install -m 600 -o mysql -g mysql "$tls_dir/server.key" "$mysql_key"
  # A server already serving the old certificate reads the new one (FLUSH SSL, MariaDB 10.4+).
  if up 3306 && as_root test -s "$mysql_tls_cnf"; then as_root mariadb -uroot -e 'FLUSH SSL' || true; fi
fi
if ! as_root test -s "$mysql_tls_cnf"; then
  printf '%s\n' "# kdirect's tests (tests/services.sh): TLS with a test certificate" "[mariadbd]" \
    "ssl_ca = $tls_dir/ca.pem" "ssl_cert = $tls_dir/server.pem" "ssl_key = $mysql_key" \
    | as_root tee "$mysql_tls_cnf" >/dev/null
  if up 3306; then
    say "restarting MariaDB once to serve TLS with $tls_dir/server.pem"
    as_root mariadb-admin -uroot shutdown >&2 || true
    for _ in $(seq 1 30); do up 3306 || break; sleep 1; done
    mariadb_restarted=1
  fi
fi
if ! up 3306; then
  as_root mkdir -p /run/mysqld && as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
  as_root /etc/init.d/mariadb start >&2 || as_root start-stop-daemon --start --oknodo --background --chuid mysql --exec /usr/sbin/mariadbd
  # A server restarted for TLS was not ours to begin with: it stays up after the tests.
  [ -n "${mariadb_restarted:-}" ] || started mariadb
  wait_up 3306 MariaDB
fi
as_root mariadb -uroot -e "CREATE DATABASE IF NOT EXISTS kdirect_test;
  CREATE USER IF NOT EXISTS 'kdirect'@'127.0.0.1' IDENTIFIED BY 'kdirect';
  CREATE USER IF NOT EXISTS 'kdirect'@'localhost' IDENTIFIED BY 'kdirect';
  GRANT ALL ON *.* TO 'kdirect'@'127.0.0.1'; GRANT ALL ON *.* TO 'kdirect'@'localhost';"

# --- Redis -------------------------------------------------------------------------------
if ! command -v redis-server >/dev/null; then apt_install redis-server; fi
if ! up 6379; then
  mkdir -p /tmp/kdirect-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/kdirect-redis --logfile /tmp/kdirect-redis/redis.log >&2
  started redis 6379
  wait_up 6379 Redis
fi
# A second Redis that speaks TLS only (rediss://, port 39630), with the test certificate,
# asking every client for a certificate of the test CA (`cert=`/`key=`). One left serving an
# older certificate is started again.
redis_tls_port=39630
redis_tls_home=/tmp/kdirect-redis-tls
if [ -n "$tls_new" ] && up "$redis_tls_port" && [ -s "$redis_tls_home/redis.pid" ]; then
  kill "$(cat "$redis_tls_home/redis.pid")" 2>/dev/null || true
  for _ in $(seq 1 50); do up "$redis_tls_port" || break; sleep 0.1; done
fi
if ! up "$redis_tls_port"; then
  mkdir -p "$redis_tls_home"
  as_root cat "$tls_dir/server.key" > "$redis_tls_home/server.key"
  chmod 600 "$redis_tls_home/server.key"
  redis-server --daemonize yes --bind 127.0.0.1 --port 0 --tls-port "$redis_tls_port" \
    --tls-cert-file "$tls_dir/server.pem" --tls-key-file "$redis_tls_home/server.key" \
    --tls-ca-cert-file "$tls_dir/ca.pem" --tls-auth-clients yes --save "" --appendonly no \
    --dir "$redis_tls_home" --logfile "$redis_tls_home/redis.log" \
    --pidfile "$redis_tls_home/redis.pid" >&2
  for _ in $(seq 1 50); do [ -s "$redis_tls_home/redis.pid" ] && break; sleep 0.1; done
  started pid "$(cat "$redis_tls_home/redis.pid" 2>/dev/null)" redis-server
  wait_up "$redis_tls_port" "Redis (TLS)"
fi

# --- ZooKeeper: Debian's package, run as a standalone server of our own on 39500 -----------
# (not the package's service: its data and port are the system's). Data under
# target/zookeeper, thrown away by a fresh clone like the Kafka clusters'.
zk_port=39500
if [ ! -f /usr/share/java/zookeeper.jar ]; then apt_install zookeeper; fi
if ! up "$zk_port"; then
  zk_home="${KDIRECT_ZOOKEEPER_HOME:-$here/../target/zookeeper}"
  mkdir -p "$zk_home/data"
  zk_home="$(cd "$zk_home" && pwd)"
  cat > "$zk_home/zoo.cfg" <<CFG
tickTime=2000
dataDir=$zk_home/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
CFG
  nohup java -Xmx256m -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar" \
    -Dzookeeper.log.dir="$zk_home" org.apache.zookeeper.server.ZooKeeperServerMain \
    "$zk_home/zoo.cfg" > "$zk_home/server.log" 2>&1 &
  started pid $! ZooKeeperServerMain
  wait_up "$zk_port" ZooKeeper
fi

# --- An S3-compatible server: moto from PyPI (its server mode keeps S3's conditional create,
# If-None-Match), on 39600 with bucket kdirect-test, for checkpoints on object storage ------
s3_port=39600
if ! up "$s3_port"; then
  moto_home="$here/../target/moto"
  if [ ! -x "$moto_home/bin/moto_server" ]; then
    say "installing moto[server] 5.2.5 from PyPI into $moto_home"
    python3 -m venv "$moto_home" >&2 || { apt_install python3-venv; python3 -m venv "$moto_home" >&2; }
    "$moto_home/bin/pip" install -q 'moto[server]==5.2.5' >&2
  fi
  nohup "$moto_home/bin/moto_server" -H 127.0.0.1 -p "$s3_port" > "$moto_home/server.log" 2>&1 &
  started pid $! moto_server
  wait_up "$s3_port" "moto (S3)"
  "$moto_home/bin/python" - "$s3_port" <<'PY'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}", region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
s3.create_bucket(Bucket="kdirect-test")
PY
fi

# --- pyarrow and deltalake from PyPI: the independent readers of the Parquet sink's files
# (tests/it/lakehouse.rs and kill.rs read them with pyarrow.dataset, which skips `_`/`.` names as
# Spark does) and of the Delta sink's tables (lakehouse.rs, with delta-rs's Python binding) ----
pyarrow_home="$here/../target/pyarrow"
if ! "$pyarrow_home/bin/python" -c 'import pyarrow.dataset, deltalake' 2>/dev/null; then
  say "installing pyarrow 22.0.0 and deltalake 1.6.6 from PyPI into $pyarrow_home"
  [ -x "$pyarrow_home/bin/pip" ] || python3 -m venv "$pyarrow_home" >&2 || { apt_install python3-venv; python3 -m venv "$pyarrow_home" >&2; }
  "$pyarrow_home/bin/pip" install -q 'pyarrow==22.0.0' 'deltalake==1.6.6' >&2
fi

# --- Azure Blob Storage's emulator: Azurite from npm (it keeps Put Blob's If-None-Match: *), on
# 39610 with container kdirect-test in the emulator's account, for checkpoints on Azure -------
az_port=39610
if ! up "$az_port"; then
  az_home="$here/../target/azurite"
  if [ ! -x "$az_home/node_modules/.bin/azurite-blob" ]; then
    say "installing azurite 3.35.0 from npm into $az_home"
    command -v npm >/dev/null || apt_install npm
    mkdir -p "$az_home"
    npm install --no-audit --no-fund --silent --prefix "$az_home" azurite@3.35.0 >&2
  fi
  mkdir -p "$az_home/data"
  nohup "$az_home/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$az_port" \
    --location "$az_home/data" --skipApiVersionCheck --disableTelemetry --silent \
    > "$az_home/server.log" 2>&1 &
  started pid $! azurite
  wait_up "$az_port" "Azurite (Azure Blob)"
fi
node "$here/azurite/create-container.js" "http://127.0.0.1:$az_port/devstoreaccount1" kdirect-test

# --- Apache HBase (standalone, from Maven Central jars) and its REST gateway on 39530 --------
if ! up 39530; then started hbase; elif ! up 39531; then started hbase-tls; fi
bash "$here/hbase/hbase.sh" up >&2

# --- HDFS: Hadoop's MiniDFSCluster (from Maven Central jars), NameNode RPC on 39540 ----------
if ! up 39540; then started hdfs; fi
bash "$here/hdfs/hdfs.sh" up >&2

# --- MIT Kerberos: a KDC of our own for realm KDIRECT.TEST on 38088 (Debian's krb5-kdc; the
# realm under target/kerberos), before Kafka: the kerberos cluster's broker logs in to it ----
if ! bash "$here/kerberos/kdc.sh" is-up; then started kerberos; fi
bash "$here/kerberos/kdc.sh" up >&2

# --- Apache Kafka (KRaft, from Maven Central jars) ----------------------------------------
for c in ${KDIRECT_KAFKA_CLUSTERS:-single trio old secure kerberos}; do
  bash "$here/kafka/kafka.sh" is-up "$c" || started kafka "$c"
done
bash "$here/kafka/kafka.sh" up >&2

export KDIRECT_TEST_POSTGRES="postgres://postgres:$pg_password@127.0.0.1:5432/kdirect_test"
export KDIRECT_TEST_MYSQL="mysql://kdirect:kdirect@127.0.0.1:3306/kdirect_test"
export KDIRECT_TEST_REDIS="redis://127.0.0.1:6379/"
# The stores over TLS: the CA the servers' certificate is signed by, and Redis's TLS port.
export KDIRECT_TEST_TLS_CA="$tls_dir/ca.pem"
export KDIRECT_TEST_REDIS_TLS="rediss://127.0.0.1:$redis_tls_port/"
export KDIRECT_TEST_ZOOKEEPER="zk://127.0.0.1:$zk_port"
export KDIRECT_TEST_S3="http://127.0.0.1:$s3_port/kdirect-test"
export KDIRECT_TEST_AZURE="http://127.0.0.1:$az_port/devstoreaccount1/kdirect-test"
export KDIRECT_TEST_HBASE="hbase://127.0.0.1:39530"
export KDIRECT_TEST_HBASE_TLS="hbases://127.0.0.1:39531"
KDIRECT_TEST_PYARROW="$(cd "$pyarrow_home" && pwd)/bin/python"
export KDIRECT_TEST_PYARROW
eval "$(bash "$here/hdfs/hdfs.sh" env)"
eval "$(bash "$here/kafka/kafka.sh" env)"
eval "$(bash "$here/kerberos/kdc.sh" env)"

# --- Apache Spark (local mode, from Maven Central jars; run by tests/it/spark.rs) -----------
bash "$here/spark/spark.sh" fetch >&2
eval "$(bash "$here/spark/spark.sh" env)"

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  env | grep -E '^KDIRECT_TEST_' | sed 's/^/export /'
fi
