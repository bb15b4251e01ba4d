#!/usr/bin/env bash
# Streaming benchmark (issue 4 "Done when", issue 6): a synthetic model larger
# than its RAM budget, packed into a store, decoded with `deltafin generate`
# cold and warm, pilot on and off; expert-read throughput compared with the
# drive's own O_DIRECT ceiling for the same block size (bench_drive on the
# store's own data file, right before and right after); time to first token
# of a 512-token prompt. Appends a markdown report to RESULTS and deletes
# everything it wrote.
#
# Usage: streaming_bench.sh BUILD_DIR WORK_DIR RESULTS_MD
# Environment (defaults in brackets):
#   SYNTH      synth options [deepseek_v3 layout, hidden 3584, moe_inter 3072, MXFP4, 64 experts, 5 layers]
#   BUDGET     --ram-budget [1500M]        TOKENS   decode tokens [24]
#   PROMPT     prefill prompt length [512] QD       --queue-depth [16]
#   THREADS    compute threads [2]         CEIL_QD  queue depths of the ceiling [1,4,16]
#   TTFT_RUNS  state:pilot pairs of the prompt runs ["cold:on warm:on cold:off"]
# A resident run of the same checkpoint (every weight in RAM, page cache warm
# from writing it) gives the compute-only decode speed for comparison.
# "cold": sync + drop_caches before the run (this machine's page cache only;
# the host may still cache the blocks: shared/MEASURING.md). "warm": the
# same command again right after. Runs use --no-heat-update, so no expert is
# pinned from a previous run: every hit comes from the dynamic cache.
set -euo pipefail
build=$1
work=$2
results=$3
bin=$build/src/cli/deltafin
drive_bench=$build/bench/store/bench_drive
SYNTH=${SYNTH:-"--arch deepseek_v3 --encoding mxfp4 --hidden 3584 --moe-inter 3072 --inter 1024 --experts 64 --top-k 8 --layers 5 --vocab 4096 --heads 8 --set q_lora_rank=256 --set kv_lora_rank=128 --set qk_nope_head_dim=64 --set qk_rope_head_dim=32 --set v_head_dim=64"}
BUDGET=${BUDGET:-1500M}
TOKENS=${TOKENS:-24}
PROMPT=${PROMPT:-512}
QD=${QD:-16}
THREADS=${THREADS:-2}
CEIL_QD=${CEIL_QD:-1,4,16}
TTFT_RUNS=${TTFT_RUNS:-"cold:on warm:on cold:off"}

[ -x "$bin" ] || { echo "no deltafin binary at $bin: build the deltafin target" >&2; exit 1; }
[ -x "$drive_bench" ] || { echo "no bench_drive at $drive_bench: build the bench_drive target" >&2; exit 1; }
mkdir -p "$work"
cleanup() { rm -rf "$work/model" "$work/store" "$work/drive0"; }
trap cleanup EXIT
log=$work/log.txt
: > "$log"
say() { echo "$*" | tee -a "$log" >&2; }

say "df before: $(df -h "$work" | tail -1)"
t0=$(date +%s.%N)
# shellcheck disable=SC2086
"$bin" synth $SYNTH --out "$work/model" 2>>"$log"
t1=$(date +%s.%N)
"$bin" pack --model "$work/model" --out "$work/store" --drives "$work/drive0" 2>>"$log"
t2=$(date +%s.%N)
model_bytes=$(jq .bytes "$work/model/synth.json")
"$bin" inspect --model "$work/model" --json --threads 1 > "$work/inspect.json"
expert_bytes=$(jq .bytes_per_expert "$work/inspect.json")
data_file=$work/drive0/deltafin-experts.bin
say "synth $(printf %.1f "$(echo "$t1 - $t0" | bc)") s, pack $(printf %.1f "$(echo "$t2 - $t1" | bc)") s; model $model_bytes bytes, $expert_bytes per expert"

ceiling() {  # $1: json out
  "$drive_bench" --file "$data_file" --blocks "$expert_bytes" --qd "$CEIL_QD" --io uring --states cold,warm \
    --seconds 1 --repeat 3 --json "$1" > /dev/null 2>>"$log"
}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
prompt_of() {  # $1 tokens: bos then pseudo-random ids below the vocabulary
  local v n
  v=$(jq .vocab "$work/inspect.json")
  n=$1
  awk -v n="$n" -v v="$v" 'BEGIN { srand(7); s = "0"; for (i = 1; i < n; i++) s = s "," int(2 + rand() * (v - 2)); print s }'
}
run() {  # $1 name, $2 pilot, $3 cold|warm, $4 prompt tokens, $5 max tokens
  [ "$3" = cold ] && drop
  local load
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  "$bin" generate --model "$work/store" --ram-budget "$BUDGET" --pilot "$2" --queue-depth "$QD" --threads "$THREADS" \
    --prompt-tokens "$(prompt_of "$4")" --max-tokens "$5" --ignore-eos --no-heat-update \
    --stats-json "$work/$1.json" > /dev/null 2>>"$log"
  jq --arg load "$load" --arg state "$3" --arg pilot "$2" '. + {load_before: $load, state: $state, pilot: $pilot}' \
    "$work/$1.json" > "$work/$1.tmp" && mv "$work/$1.tmp" "$work/$1.json"
  say "$1: $(jq -c '{decode_tok_s, ttft_s, bytes: .streaming.bytes_read, io_wait_s: .streaming.io_wait_s}' "$work/$1.json")"
}

# Compute only: the checkpoint itself, all in RAM (just written: page cache warm).
"$bin" generate --model "$work/model" --threads "$THREADS" --prompt-tokens 0 --max-tokens "$TOKENS" --ignore-eos \
  --stats-json "$work/resident.json" > /dev/null 2>>"$log"
say "resident: $(jq -c '{decode_tok_s, peak_rss_bytes}' "$work/resident.json")"
ceiling "$work/ceiling_before.json"
for pilot in on off; do
  run "prefill_only_pilot_$pilot" "$pilot" cold 1 1
  run "decode_cold_pilot_$pilot" "$pilot" cold 1 "$TOKENS"
  run "decode_warm_pilot_$pilot" "$pilot" warm 1 "$TOKENS"
done
for sp in $TTFT_RUNS; do
  run "ttft_${sp%%:*}_pilot_${sp##*:}" "${sp##*:}" "${sp%%:*}" "$PROMPT" 1
done
ceiling "$work/ceiling_after.json"

# ---- report
commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD)
{
  echo
  echo "## streaming_bench.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit"
  echo
  echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(grep MemTotal /proc/meminfo | xargs), kernel $(uname -r)"
  echo "- disk: $(df -h "$work" | tail -1 | awk '{print $1" ("$2", mounted on "$6")"}')"
  echo "- model: \`deltafin synth $SYNTH\`: $model_bytes bytes ($(jq -r '"\(.layers) layers, \(.moe_layers) MoE x \(.experts_per_layer) experts, top-\(.experts_per_token), \(.expert_bytes) bytes of experts, \(.bytes_per_expert) per expert, spine \(.spine_bytes) bytes"' "$work/inspect.json"))"
  echo "- synth $(printf %.1f "$(echo "$t1 - $t0" | bc)") s, pack (one drive directory) $(printf %.1f "$(echo "$t2 - $t1" | bc)") s"
  echo "- runs: \`deltafin generate --model STORE --ram-budget $BUDGET --queue-depth $QD --threads $THREADS --ignore-eos --no-heat-update --pilot on|off --stats-json F\`; decode: prompt of 1 token, $TOKENS tokens; TTFT: $PROMPT-token prompt, 1 token"
  echo "- RAM budget $BUDGET vs $(jq '.streaming.expert_records' "$work/decode_cold_pilot_on.json") expert records of $expert_bytes bytes: $(jq -r '"\(.streaming.slots) slots (\(.streaming.spine_bytes) bytes of spine)"' "$work/decode_cold_pilot_on.json")"
  echo "- ceiling: \`bench_drive --file STORE_DATA_FILE --blocks $expert_bytes --qd $CEIL_QD --io uring --states cold,warm --seconds 1 --repeat 3\` right before and after the runs (median GB/s of 3)"
  echo
  echo "| ceiling | qd | state | before GB/s (min-max) | after GB/s (min-max) |"
  echo "|---|---:|---|---:|---:|"
  jq -r -s '.[0].points as $b | .[1].points as $a | $b | to_entries[] | .key as $i | .value |
      "| uring | \(.queue_depth) | \(.state) | \(.GBps * 100 | round / 100) (\(.GBps_min * 100 | round / 100)-\(.GBps_max * 100 | round / 100)) | \($a[$i].GBps * 100 | round / 100) (\($a[$i].GBps_min * 100 | round / 100)-\($a[$i].GBps_max * 100 | round / 100)) |"' \
    "$work/ceiling_before.json" "$work/ceiling_after.json" 2>/dev/null || echo "(ceiling JSON not in the expected form; see below)"
  echo
} >> "$results"
# The best ceiling over queue depths and states, mean of before and after.
best=$(jq -s '[.[0].points[], .[1].points[]] | group_by("\(.queue_depth) \(.state)") | map((map(.GBps) | add) / length) | max' \
  "$work/ceiling_before.json" "$work/ceiling_after.json" 2>/dev/null || echo 0)
at_qd=$(jq -s --argjson qd "$QD" '[.[0].points[], .[1].points[]] | map(select(.queue_depth == $qd)) | if length > 0 then (map(.GBps) | add) / length else 0 end' \
  "$work/ceiling_before.json" "$work/ceiling_after.json" 2>/dev/null || echo 0)
{
  echo "Decode: expert-read throughput = (bytes read by the run - bytes read by the same prompt with 1 token) / decode seconds. Best ceiling (any qd, mean of before/after): $(printf %.2f "$best") GB/s; at qd $QD: $(printf %.2f "$at_qd") GB/s."
  echo
  echo "| state | pilot | decode tok/s | bytes read / token | read GB/s | % of best ceiling | % of ceiling at qd $QD | io_wait s / decode s | missed | cached | prefetched | pilot recall | peak RSS |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for pilot in on off; do
    for state in cold warm; do
      f=$work/decode_${state}_pilot_$pilot.json
      p=$work/prefill_only_pilot_$pilot.json
      jq -r -s --arg name "$state" --argjson best "$best" --argjson atqd "$at_qd" '.[0] as $r | .[1] as $p |
        ($r.decode_tokens / $r.decode_tok_s) as $ds |
        (($r.streaming.bytes_read - $p.streaming.bytes_read) / $ds / 1e9) as $gbps |
        ([$r.streaming.pilot[]? | .recall] | if length > 0 then (add / length * 100 | round | tostring) + " %" else "-" end) as $rec |
        "| \($name) | \($r.pilot) | \($r.decode_tok_s * 100 | round / 100) | \((($r.streaming.bytes_read - $p.streaming.bytes_read) / $r.decode_tokens / 1e6) | round) MB | \($gbps * 100 | round / 100) | \($gbps / $best * 100 | round) % | \(if $atqd > 0 then ($gbps / $atqd * 100 | round | tostring) + " %" else "-" end) | \($r.streaming.io_wait_s * 100 | round / 100) / \($ds * 100 | round / 100) | \($r.streaming.hit_rate.missed * 100 | round) % | \($r.streaming.hit_rate.cached * 100 | round) % | \($r.streaming.hit_rate.prefetched * 100 | round) % | \($rec) | \($r.peak_rss_bytes / 1e6 | round) MB |"' \
        "$f" "$p"
    done
  done
  echo
  echo "Compute only (the checkpoint resident, every weight in RAM): decode $(jq '.decode_tok_s * 100 | round / 100' "$work/resident.json") tok/s over $TOKENS tokens."
  echo
  echo "| prefill | pilot | prompt tokens | TTFT s | prefill tok/s | bytes read | records read | read GB/s over TTFT | io_wait s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for sp in $TTFT_RUNS; do
    jq -r '"| \(.state) | \(.pilot) | \(.prefill_tokens) | \(.ttft_s * 1000 | round / 1000) | \(.prefill_tok_s * 10 | round / 10) | \(.streaming.bytes_read) | \(.streaming.records_read) | \(.streaming.bytes_read / .ttft_s / 1e9 * 100 | round / 100) | \(.streaming.io_wait_s * 100 | round / 100) |"' \
      "$work/ttft_${sp%%:*}_pilot_${sp##*:}.json"
  done
  echo
  echo "<details><summary>Raw stats JSON and log</summary>"
  echo
  echo '```'
  cat "$log"
  for f in "$work"/*.json; do echo "== $(basename "$f")"; jq -c . "$f"; done
  echo '```'
  echo "</details>"
} >> "$results"
say "df after run (before cleanup): $(df -h "$work" | tail -1)"
