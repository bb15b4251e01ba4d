#!/usr/bin/env bash
# Whole-model decode speed on a resident model (issue 2): the demo MoE, and a
# synthetic model with Qwen3-30B-A3B's layer shape (hidden 2048, 128 experts
# of 768, top-8, GQA 32/4 x 128, bf16 as published) cut to 4 layers so that
# it fits this machine's RAM. Prints tok/s and the weight bytes touched per
# second next to the machine's streaming read bandwidth.
# Usage: bench/model/resident_decode.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
bin=$build/src/cli/deltafin
work=${2:-$(mktemp -d)}
mkdir -p "$work"
trap 'rm -rf "$work/qwen3-4l"' EXIT
if [ ! -f "$work/qwen3-4l/config.json" ]; then
  "$bin" synth --arch qwen3_moe --out "$work/qwen3-4l" --layers 4 --hidden 2048 --experts 128 --top-k 8 \
    --moe-inter 768 --heads 32 --set num_key_value_heads=4 --set head_dim=128 --vocab 151936 --seed 1 2>/dev/null
fi
echo "machine: $(lscpu | grep 'Model name' | sed 's/Model name: *//'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in models/demo-moe "$work/qwen3-4l"; do
  touched=$("$bin" inspect --model "$model" --json | node -e '
    let s=""; process.stdin.on("data",d=>s+=d).on("end",()=>{const j=JSON.parse(s);
    const experts_total=j.moe_layers*j.experts_per_layer*j.bytes_per_expert;
    // weights read per decoded token: the spine (embedding row aside) + the routed experts used
    console.log(j.spine_bytes - j.vocab*j.hidden*2 + j.expert_bytes_per_token);});')
  for threads in 1 2; do
    # warm-up run maps the weights into the page cache, then the measured run
    "$bin" generate --model "$model" --prompt-tokens 1,2,3,4,5,6,7,8 --max-tokens 4 --ignore-eos --threads "$threads" >/dev/null 2>&1
    out=$("$bin" generate --model "$model" --prompt-tokens 1,2,3,4,5,6,7,8 --max-tokens 64 --ignore-eos \
          --temperature 0 --threads "$threads" --json)
    node -e '
      const j=JSON.parse(process.argv[1]); const t=j.stats.decode_tok_s; const b=Number(process.argv[2]);
      console.log(`${process.argv[3]} threads ${process.argv[4]}: decode ${t.toFixed(2)} tok/s, prefill ${j.stats.prefill_tok_s.toFixed(1)} tok/s, ${(b/1e6).toFixed(1)} MB of weights per token -> ${(t*b/1e9).toFixed(2)} GB/s`);' \
      "$out" "$touched" "$model" "$threads"
  done
done
