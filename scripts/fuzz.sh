#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of user input (cargo-fuzz on libFuzzer; fuzz/).
# Needs the nightly toolchain (cargo-fuzz's instrumentation); cargo-fuzz itself is installed
# into ~/.cache/capstan on first use. Each target starts from its committed seeds in
# fuzz/corpus/TARGET (new inputs go to target/fuzz-corpus/TARGET, crashes to
# target/fuzz-artifacts/TARGET) and runs for SECONDS; a crash fails the script, naming the
# input to turn into a regression test.
#
# The mutation seed is fixed (FUZZ_SEED, default 1) so that a crash CI finds replays here in
# the same order; set FUZZ_SEED=0 for a random one when hunting.
#
#   scripts/fuzz.sh [SECONDS per target, default 6] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.13.1
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/capstan/cargo-fuzz-$VERSION
seconds=${1:-6}
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(quantity pods nodepool cluster pdbs catalog hpa_ticks scenario fake_cloud)
fi

die() { echo "fuzz.sh: $*" >&2; exit 1; }

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "installing the nightly toolchain (cargo-fuzz's instrumentation needs it)" >&2
  rustup toolchain install nightly --profile minimal >&2 || die "needs the nightly toolchain: rustup toolchain install nightly failed"
fi
if [[ ! -x $ROOT/bin/cargo-fuzz ]]; then
  echo "installing cargo-fuzz $VERSION into $ROOT" >&2
  cargo install cargo-fuzz --version "$VERSION" --locked --root "$ROOT" >&2 || die "cargo install cargo-fuzz failed"
fi
export PATH=$ROOT/bin:$PATH
# The instrumented build is cached beside the tool (about 11 minutes cold on 2 cores).
TARGET_DIR=${CAPSTAN_FUZZ_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/capstan/fuzz-target}

# One build for every target (release, debug assertions on, no sanitizer: the code forbids
# unsafe, so what fuzzing looks for is panics, overflows and hangs).
cargo +nightly fuzz build --sanitizer none --debug-assertions --fuzz-dir fuzz --target-dir "$TARGET_DIR" >&2
for t in "${targets[@]}"; do
  mkdir -p "target/fuzz-corpus/$t" "target/fuzz-artifacts/$t"
  started=$SECONDS
  if ! cargo +nightly fuzz run --sanitizer none --debug-assertions --fuzz-dir fuzz \
      --target-dir "$TARGET_DIR" "$t" \
      "target/fuzz-corpus/$t" "fuzz/corpus/$t" -- \
      -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="target/fuzz-artifacts/$t/" -print_final_stats=1 \
      >"target/fuzz-$t.log" 2>&1; then
    tail -40 "target/fuzz-$t.log" >&2
    die "$t: a crash; the input is in target/fuzz-artifacts/$t/ (make it a regression test)"
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "target/fuzz-$t.log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "target/fuzz-$t.log" | tail -1 | grep -o '[0-9]*' || echo "?")
  echo "$t: $runs inputs in $((SECONDS - started)) s, coverage $cov, no crash"
done
