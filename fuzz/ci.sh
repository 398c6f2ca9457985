#!/usr/bin/env bash
# The fuzz step of .ci/run: builds every fuzz target once (release, no sanitizer), replays each
# committed corpus (corpus/<target>/), then fuzzes each target for FUZZ_SECONDS (default 12)
# and prints its executions. Any crash fails the step; the crashing input is left in
# artifacts/<target>/ and printed by libFuzzer (base64 for small inputs).
#
# What the fuzzers find goes to a temporary directory, never into corpus/: the committed seeds
# are passed as a second, read-only corpus directory (libFuzzer writes only to the first).
# libFuzzer needs nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets stable rustc accept them.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
seconds="${FUZZ_SECONDS:-12}"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
flags=(-O --sanitizer none)
start=$SECONDS
cargo fuzz build "${flags[@]}"
echo "built every fuzz target in $((SECONDS - start)) s"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
targets=$(cargo fuzz list)
# -rss_limit_mb: without a sanitizer libFuzzer cannot hook malloc (no -malloc_limit_mb), but it
# still watches the resident size. -timeout: one input taking 10 s is a hang.
opts=(-max_len=65536 -rss_limit_mb=1024 -timeout=10)
for target in $targets; do
  n=$(find "corpus/$target" -type f | wc -l)
  # -runs=0 executes each seed once and stops.
  if ! out=$(cargo fuzz run "${flags[@]}" "$target" "corpus/$target" -- "${opts[@]}" -runs=0 2>&1); then
    echo "$out" | tail -60
    echo "FAIL: fuzz target $target crashed on one of its $n committed seeds"
    exit 1
  fi
  echo "replayed $n seeds through $target"
done
printf '%-28s %12s %10s\n' target executions exec/s
for target in $targets; do
  mkdir -p "$work/$target"
  if ! out=$(cargo fuzz run "${flags[@]}" "$target" "$work/$target" "corpus/$target" -- \
    "${opts[@]}" -max_total_time="$seconds" -print_final_stats=1 2>&1); then
    echo "$out" | tail -80
    echo "FAIL: fuzz target $target crashed within $seconds s (input in fuzz/artifacts/$target/)"
    exit 1
  fi
  execs=$(echo "$out" | sed -n 's/^stat::number_of_executed_units: *//p')
  rate=$(echo "$out" | sed -n 's/^stat::average_exec_per_sec: *//p')
  printf '%-28s %12s %10s\n' "$target" "${execs:-?}" "${rate:-?}"
done
echo "fuzz: every target replayed its corpus and ran ${seconds} s without a crash ($((SECONDS - start)) s in all)"
