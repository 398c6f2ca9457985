#!/usr/bin/env bash
# Replays the committed fuzz seed corpora once through each fuzz target (no fuzzing): a fast
# regression check for .ci/run. libFuzzer needs cargo-fuzz and nightly-only rustc flags; this
# workplace has only stable rustc, so RUSTC_BOOTSTRAP=1 lets stable accept them. Built in the
# dev profile without a sanitizer to keep the replay short (deep runs: see fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
for target in $(cargo fuzz list); do
  n=$(find "corpus/$target" -type f | wc -l)
  echo "replaying $n seeds through $target"
  # -runs=0 executes each seed once and stops; a crash makes cargo fuzz exit non-zero.
  if ! out=$(cargo fuzz run --dev --sanitizer none "$target" "corpus/$target" -- -runs=0 2>&1); then
    echo "$out" | tail -60
    echo "FAIL: fuzz target $target crashed on a seed"
    exit 1
  fi
  echo "$out" | grep -E "INITED|Done" || true
done
echo "fuzz replay: ok"
