#!/usr/bin/env bash
# The README's test command: installs (when missing) and starts PostgreSQL, MariaDB, Redis,
# ZooKeeper, moto, Azurite, HBase, HDFS, a Kerberos KDC and Apache Kafka on loopback
# (tests/services.sh), then
# runs the whole suite with KDIRECT_REQUIRE_SERVICES=1, which turns every "service not set,
# skipping" into a failure. Extra arguments go to `cargo test` (e.g. `bash tests/run.sh --test
# it real_kafka`).
#
# When the tests end (pass, fail or Ctrl-C), the services this run started are stopped again
# (tests/stop-services.sh): about ten JVMs and 3 GB of memory otherwise stay behind. Services
# that were already running are left as they were. KDIRECT_KEEP_SERVICES=1 keeps everything
# running (faster reruns).
set -euo pipefail
cd "$(dirname "$0")/.."
KDIRECT_SERVICES_STARTED="$(mktemp "${TMPDIR:-/tmp}/kdirect-services.XXXXXX")"
export KDIRECT_SERVICES_STARTED
stop_started() {
  local rc=$?
  if [ "${KDIRECT_KEEP_SERVICES:-}" = 1 ]; then
    if [ -s "$KDIRECT_SERVICES_STARTED" ]; then
      printf '[services] KDIRECT_KEEP_SERVICES=1: left running: %s\n' \
        "$(tr '\n' ';' < "$KDIRECT_SERVICES_STARTED")" >&2
    fi
  else
    bash tests/stop-services.sh "$KDIRECT_SERVICES_STARTED"
  fi
  rm -f "$KDIRECT_SERVICES_STARTED"
  exit "$rc"
}
trap stop_started EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# shellcheck source=tests/services.sh
source tests/services.sh
export KDIRECT_REQUIRE_SERVICES=1
# With the Delta sink (feature `delta`, off by default): its unit tests and the CLI's
# `--sink delta:` read back by the Python deltalake package; and with SASL/GSSAPI (feature
# `gssapi`, off by default): tests/it/kerberos.rs against the KDC and the Kerberized Kafka
# node; and JSON values to Arrow columns (feature `json-values`, off by default). One build: the
# features only add delta-rs's crates (arrow-json among them) and libloading to the test build.
cargo test --workspace --features kdirect/delta,kdirect/gssapi,kdirect/json-values "$@"
