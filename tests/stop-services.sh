#!/usr/bin/env bash
# Stops the services tests/services.sh started, as it listed them in FILE (it writes one line
# per service it starts to the file KDIRECT_SERVICES_STARTED names), the last started first.
# A service services.sh found already running is not in the file and stays up.
#
#   stop-services.sh FILE
#
# Lines: `postgres VERSION`, `mariadb`, `redis PORT`, `pid PID NAME` (a process, stopped only
# while its command line still names NAME: a pid the system has since given to another process
# is left alone), `hbase`, `hbase-tls` (its HTTPS gateway only), `hdfs`, `kerberos` (the KDC),
# `kafka CLUSTER`.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { printf '[services] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

file="${1:?usage: stop-services.sh FILE}"
[ -s "$file" ] || exit 0
tac "$file" | while read -r kind a b; do
  case "$kind" in
    postgres) say "stopping PostgreSQL $a"
      as_root pg_ctlcluster --skip-systemctl-redirect "$a" main stop >&2 ;;
    mariadb) say "stopping MariaDB"; as_root mariadb-admin -uroot shutdown >&2 ;;
    redis) say "stopping Redis on $a"
      redis-cli -h 127.0.0.1 -p "$a" shutdown nosave >/dev/null 2>&1 ;;
    pid)
      if [ -n "$a" ] && tr '\0' ' ' < "/proc/$a/cmdline" 2>/dev/null | grep -qF -- "$b"; then
        say "stopping $b (pid $a)"
        kill "$a" 2>/dev/null
        for _ in $(seq 1 40); do kill -0 "$a" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$a" 2>/dev/null
      fi ;;
    hbase | hdfs) say "stopping $kind"; bash "$here/$kind/$kind.sh" down >&2 ;;
    hbase-tls) say "stopping HBase's HTTPS gateway"; bash "$here/hbase/hbase.sh" down tls >&2 ;;
    kafka) say "stopping Kafka cluster $a"; bash "$here/kafka/kafka.sh" down "$a" >&2 ;;
    kerberos) say "stopping the Kerberos KDC"; bash "$here/kerberos/kdc.sh" down >&2 ;;
    *) say "stop-services.sh: unknown line '$kind $a $b' in $file" ;;
  esac
done
exit 0
