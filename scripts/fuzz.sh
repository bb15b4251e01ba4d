#!/usr/bin/env bash
# Open-ended fuzzing of the parsers of untrusted input with libFuzzer (clang),
# ASan and UBSan: scripts/fuzz.sh [SECONDS_PER_TARGET]. Crashes land in
# build-fuzz/crash-*; add the input to tests/fuzz/corpus/NAME/ once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDELTAFIN_FUZZ=ON -DDELTAFIN_SANITIZE=ON -DDELTAFIN_BENCH=OFF >/dev/null
for src in tests/fuzz/fuzz_*.cc; do
  name=$(basename "$src" .cc)
  corpus=tests/fuzz/corpus/${name#fuzz_}
  cmake --build build-fuzz --target "$name" -j "$(nproc)"
  work=build-fuzz/corpus-${name#fuzz_}
  mkdir -p "$work"
  (cd build-fuzz && "./tests/fuzz/$name" -max_total_time="$secs" -print_final_stats=1 "../$work" "../$corpus")
done
