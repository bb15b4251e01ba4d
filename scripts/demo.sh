#!/usr/bin/env bash
# The main job: build deltafin and generate text with the demo model shipped
# in models/. Installs its own dependencies first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTAFIN_TESTS=OFF -DDELTAFIN_BENCH=OFF >/dev/null
cmake --build build -j "$(nproc)" --target deltafin
model=models/demo-moe
if [ ! -f "$model/config.json" ]; then
  echo "demo: $model is missing from this checkout" >&2
  exit 1
fi
./build/src/cli/deltafin inspect --model "$model"
./build/src/cli/deltafin generate --model "$model" --prompt "${1:-Once upon a time}" --max-tokens "${2:-80}" --temperature 0.8 --seed 1
