#!/usr/bin/env bash
# The README's test command: installs (when missing) and starts PostgreSQL, MariaDB, Redis and
# Apache Kafka on loopback (tests/services.sh), then runs the whole suite with
# KDIRECT_REQUIRE_SERVICES=1, which turns every "service not set, skipping" into a failure.
# Extra arguments go to `cargo test` (e.g. `bash tests/run.sh --test it real_kafka`).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tests/services.sh
source tests/services.sh
export KDIRECT_REQUIRE_SERVICES=1
cargo test --workspace "$@"
