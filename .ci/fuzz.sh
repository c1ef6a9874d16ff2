#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for FUZZ_SECONDS (default 60) each, starting from its
# committed corpus (fuzz/corpus/<target>); new inputs go to a scratch directory, so the
# checkout is not modified. A crash fails the run and leaves its input in fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
cargo +nightly fuzz build

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for target in $(cargo +nightly fuzz list); do
  echo "fuzz: $target for ${seconds}s"
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  if ! cargo +nightly fuzz run "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$seconds" >"$log" 2>&1; then
    tail -n 80 "$log"
    exit 1
  fi
  grep -E '^Done' "$log"
done
