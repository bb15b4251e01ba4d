#!/usr/bin/env bash
# Which dynamic cache policy serves more expert uses from RAM? The demo MoE
# (4 MoE layers x 32 experts, 96 KiB records) packed over two drive dirs,
# decoding 200 tokens from 3 prompts at budgets of 16, 32 and 64 slots, the
# hot set and the pilot off so that only the dynamic cache differs.
# Usage: bench/residency/cache_policy.sh [BUILD_DIR]  (prints a markdown table)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build}/src/cli/deltafin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" pack --model models/demo-moe --out "$work/store" --drives "$work/d1,$work/d2" 2>/dev/null
spine=$("$bin" generate --model "$work/store" --prompt-tokens 0 --max-tokens 1 --no-heat-update --stats-json "$work/s.json" >/dev/null 2>&1; grep -o '"spine_bytes": *[0-9]*' "$work/s.json" | grep -o '[0-9]*$')
slot=$(grep -o '"slot_bytes": *[0-9]*' "$work/s.json" | grep -o '[0-9]*$')
over=$(grep -o '"fixed_overhead_bytes": *[0-9]*' "$work/s.json" | grep -o '[0-9]*$')
echo "| slots | prompt | lru hit % | lfu hit % |"
echo "|---|---|---|---|"
for slots in 16 32 64; do
  budget=$((spine + over + slots * slot))
  for p in "The state of the Union is" "Call me Ishmael." "It was a cold morning when the captain"; do
    row="| $slots | $p |"
    for pol in lru lfu; do
      "$bin" generate --model "$work/store" --ram-budget "$budget" --prompt "$p" --max-tokens 200 --ignore-eos \
        --temperature 0.8 --seed 7 --pilot off --hot-fraction 0 --cache-policy "$pol" --no-heat-update \
        --threads 1 --stats-json "$work/$pol.json" >/dev/null 2>&1
      hit=$(node -e 'const j=require(process.argv[1]); console.log((100*j.streaming.hit_rate.cached).toFixed(1))' "$work/$pol.json")
      row="$row $hit |"
    done
    echo "$row"
  done
done
