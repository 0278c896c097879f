#!/usr/bin/env bash
# Fuzz the webhook with cargo-fuzz (libFuzzer, nightly toolchain).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS: time per target (default 600). TARGETs: default all of
#   admission         raw /mutate body bytes -> AdmissionReview answer
#   admission_pod     a pod object (JSON) inside a fixed, valid review -> answer
#   inject_documents  `inject` input stream (YAML/JSON, multi-document) -> output or error
#
# Installs what is missing (nightly toolchain via rustup, cargo-fuzz into
# ~/.cargo/bin), seeds fuzz/corpus/TARGET from the golden inputs
# (fuzz/make_seeds.py, needs python3 + PyYAML) and the committed seeds in
# fuzz/seeds/TARGET, and runs each target niced with -max_total_time. The
# corpus grows across runs (git-ignored). A crash leaves its input in
# fuzz/artifacts/TARGET/ and makes the script exit non-zero; reproduce it
# with `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...`, fix
# it, and commit the input as fuzz/regressions/TARGET/NAME: the normal test
# suite replays those (webhook/server/tests/proptest_admission.rs for admission;
# add a test for other targets the same way).
#
# Environment: FUZZ_JOBS (parallel libFuzzer jobs per target, default 1),
# FUZZ_NICE (default 10).
set -euo pipefail

seconds=${1:-600}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(admission admission_pod inject_documents)
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    if [[ -d "fuzz/seeds/$t" ]]; then
        cp -n fuzz/seeds/"$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
    fi
done
if python3 -c 'import yaml' 2>/dev/null; then
    python3 fuzz/make_seeds.py fuzz/corpus
else
    echo "fuzz.sh: python3 with PyYAML not found: using the committed seeds only" >&2
fi

export CARGO_TARGET_DIR="$root/fuzz/target"
extra=()
if [[ ${FUZZ_JOBS:-1} -gt 1 ]]; then
    extra=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
fi
status=0
for t in "${targets[@]}"; do
    echo "== fuzz target $t: ${seconds}s" >&2
    log="fuzz/artifacts/$t.log"
    mkdir -p fuzz/artifacts
    # -timeout: one input taking over 10 s is a hang; -rss_limit_mb bounds memory.
    if ! nice -n "${FUZZ_NICE:-10}" cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 "${extra[@]}" 2>&1 | tee "$log" >&2; then
        echo "fuzz.sh: target $t FAILED (see $log and fuzz/artifacts/$t/)" >&2
        status=1
    fi
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs)' "$log" >&2 || true
done
exit "$status"
