#!/usr/bin/env bash
# An MIT Kerberos KDC on loopback for the SASL/GSSAPI tests (tests/it/kerberos.rs): Debian's
# krb5-kdc, a realm of its own (KDIRECT.TEST) whose database, configuration, keytabs and log
# live in $KDIRECT_KERBEROS_HOME (default target/kerberos), and krb5kdc on 127.0.0.1:38088
# (TCP). The Kerberized Kafka node is tests/kafka/kafka.sh's `kerberos` cluster, which reads
# the broker's keytab and krb5.conf from here.
#
#   kdc.sh up       install what is missing (Debian: krb5-kdc, krb5-admin-server, krb5-user,
#                   libgssapi-krb5-2, faketime); make the realm once; start the KDC unless it
#                   answers
#   kdc.sh down     stop the KDC
#   kdc.sh is-up    exit 0 when the KDC answers
#   kdc.sh env      print the KDIRECT_TEST_KERBEROS* variables to export
#
# The realm: principals kafka/localhost (the broker; keytab broker.keytab), alice (keytab
# alice.keytab), and ghost, whose keytab ghost.keytab outlives the principal (deleted from
# the database: "client not found"), and brief (keytab brief.keytab), whose tickets last 20
# seconds (for logins that must outlive their tickets; added to a realm made before it). Its krb5.conf turns off everything that would make a
# test depend on this machine: DNS (no lookups, no canonicalisation: the service principal is
# kafka/localhost for a broker reached as localhost), UDP (TCP only), and the client's silent
# correction of its clock from the KDC's (kdc_timesync = 0: a skewed clock is an error).
# Principals require pre-authentication, so the KDC checks the client's clock too; tickets
# last at most one hour. The default ticket cache is a file here, never the user's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
home="${KDIRECT_KERBEROS_HOME:-$root/target/kerberos}"
realm=KDIRECT.TEST
port=38088
say() { printf '[kerberos] %s\n' "$*" >&2; }
up() { timeout 1 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# shellcheck source=../pid.sh
. "$here/../pid.sh"

install() {
  local need=()
  command -v krb5kdc >/dev/null || need+=(krb5-kdc)
  command -v kadmin.local >/dev/null || need+=(krb5-admin-server)
  command -v kinit >/dev/null || need+=(krb5-user)
  ldconfig -p 2>/dev/null | grep -q 'libgssapi_krb5.so.2 ' || need+=(libgssapi-krb5-2)
  command -v faketime >/dev/null || need+=(faketime)
  if ((${#need[@]})); then
    say "installing ${need[*]} from Debian"
    as_root apt-get update -qq >&2
    # The packages' own services stay off (they would serve the system's realm, not ours).
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
  fi
}

# The variables every Kerberos command of this realm runs with.
realm_env() {
  export KRB5_CONFIG="$home/krb5.conf" KRB5_KDC_PROFILE="$home/kdc.conf"
  export KRB5CCNAME="FILE:$home/ccache-default"
}

make_realm() {
  [ -f "$home/.complete" ] && return 0
  rm -rf "$home"
  mkdir -p "$home"
  cat >"$home/krb5.conf" <<CONF
[libdefaults]
  default_realm = $realm
  dns_lookup_realm = false
  dns_lookup_kdc = false
  dns_canonicalize_hostname = false
  rdns = false
  udp_preference_limit = 1
  kdc_timesync = 0
  ticket_lifetime = 1h
  forwardable = false
  default_ccache_name = FILE:$home/ccache-default

[realms]
  $realm = {
    kdc = 127.0.0.1:$port
  }

[domain_realm]
  localhost = $realm
CONF
  cat >"$home/kdc.conf" <<CONF
[kdcdefaults]
  kdc_listen = 127.0.0.1:$port
  kdc_tcp_listen = 127.0.0.1:$port

[realms]
  $realm = {
    database_name = $home/principal
    key_stash_file = $home/stash
    acl_file = $home/kadm5.acl
    max_life = 1h
    max_renewable_life = 0
    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    default_principal_flags = +preauth
  }

[logging]
  kdc = FILE:$home/kdc.log
CONF
  : >"$home/kadm5.acl"
  (
    realm_env
    kdb5_util create -s -r "$realm" -P "kdirect-test-master-$RANDOM$RANDOM"
    kadmin.local -r "$realm" -q "addprinc -randkey kafka/localhost@$realm"
    kadmin.local -r "$realm" -q "ktadd -k $home/broker.keytab kafka/localhost@$realm"
    kadmin.local -r "$realm" -q "addprinc -randkey alice@$realm"
    kadmin.local -r "$realm" -q "ktadd -k $home/alice.keytab alice@$realm"
    kadmin.local -r "$realm" -q "addprinc -randkey ghost@$realm"
    kadmin.local -r "$realm" -q "ktadd -k $home/ghost.keytab ghost@$realm"
    kadmin.local -r "$realm" -q "delprinc -force ghost@$realm"
  ) >"$home/setup.log" 2>&1 || { cat "$home/setup.log" >&2; say "FAIL: could not make the realm"; return 1; }
  touch "$home/.complete"
  say "made realm $realm in $home"
}

# Principals added after the first realms were made: each once, into an existing realm.
later_principals() {
  [ -f "$home/brief.keytab" ] && return 0
  (
    realm_env
    # MIT takes the smallest of the principal's, krbtgt's and the realm's max_life: 20 s.
    kadmin.local -r "$realm" -q "addprinc -randkey -maxlife \"20 seconds\" brief@$realm"
    kadmin.local -r "$realm" -q "ktadd -k $home/brief.keytab brief@$realm"
  ) >>"$home/setup.log" 2>&1 || { tail -5 "$home/setup.log" >&2; say "FAIL: could not add brief@$realm"; return 1; }
  say "added brief@$realm (tickets of 20 s)"
}

start() {
  if up "$port"; then
    if ! live_pid "$home/krb5kdc.pid" "$home" >/dev/null; then
      say "FAIL: port $port is held by another process"; return 1
    fi
    say "KDC already up at 127.0.0.1:$port"; return 0
  fi
  (
    realm_env
    # Daemonizes; its command line names $home (the pid file), which `down` checks.
    krb5kdc -r "$realm" -P "$home/krb5kdc.pid"
  ) >>"$home/kdc.stdout" 2>&1 || { cat "$home/kdc.stdout" >&2; return 1; }
  for _ in $(seq 1 50); do up "$port" && break; sleep 0.1; done
  up "$port" || { tail -20 "$home/kdc.log" >&2; say "FAIL: the KDC did not open port $port"; return 1; }
  say "KDC up at 127.0.0.1:$port (realm $realm)"
}

stop() {
  local pid
  pid="$(live_pid "$home/krb5kdc.pid" "$home")" || { rm -f "$home/krb5kdc.pid"; return 0; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$home/krb5kdc.pid"
}

case "${1:-}" in
  up) install; make_realm; later_principals; start ;;
  down) stop ;;
  is-up) up "$port" ;;
  env)
    echo "export KDIRECT_TEST_KERBEROS=$home"
    echo "export KDIRECT_TEST_KERBEROS_REALM=$realm" ;;
  *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
