#!/usr/bin/env bash
# The main job: build deltafin, pack the demo MoE shipped in models/ into an
# expert store over two drive directories, and generate text under a RAM
# budget smaller than its experts, printing the measured statistics. Run it
# twice: the second run pins the experts the first run used most (heat.json).
# Installs its own dependencies first. Usage: scripts/demo.sh ["prompt"] [tokens]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target deltafin
bin=build/src/cli/deltafin
model=models/demo-moe
work=${DELTAFIN_DEMO_DIR:-build/demo}
if [ ! -f "$work/store/manifest.json" ] || ! grep -q '"complete": *true' "$work/store/manifest.json"; then
  "$bin" pack --model "$model" --out "$work/store" --drives "$work/drive1,$work/drive2"
fi
"$bin" inspect --model "$model"
echo
# 30 MiB = spine (7.1 MiB) + fixed overhead (16 MiB) + the KV cache of a
# 512-token context (0.8 MiB) + 64 expert slots: half of the 128 experts
# (12 MiB) fit; the rest stream from the drives.
"$bin" generate --model "$work/store" --ram-budget 30M --ctx-size 512 --prompt "${1:-The state of the Union is}" \
  --max-tokens "${2:-80}" --temperature 0.8 --seed 1 --stats
