#!/usr/bin/env bash
# Expert-read throughput of a streamed decode as a fraction of the drive's own
# O_DIRECT ceiling (issue 4's 85 % target), measured so that a drive whose
# speed drifts (a shared host: shared/MEASURING.md) cannot fake the ratio:
# every decode run is bracketed by a ceiling measurement right before and
# right after it (bench_drive on the store's own data file, blocks of one
# expert record, best of the queue depths), and the run's ratio uses the mean
# of its two brackets. PAIRS runs per configuration; the report gives each
# run and the median.
#
# Configurations: cold (page cache dropped, no heat.json: no pinned expert)
# and warm (heat.json from a previous run of the same prompt: the hot set is
# pinned; page cache as left), each with the pilot off and on. Throughput is
# the decode phase's own (`streaming.decode.read_GBps` in --stats-json: bytes
# read after the first token / decode seconds).
#
# Usage: read_fraction.sh BUILD_DIR WORK_DIR RESULTS_MD
# Environment (defaults in brackets):
#   SYNTH     synth options [deepseek_v3 layout, hidden 3584, MXFP4 17.5 MB experts, 64 experts, 5 layers]
#   BUDGET    --ram-budget [1500M]   TOKENS  decode tokens per run [48]
#   PAIRS     runs per configuration [5]   QD  --queue-depth [16]
#   CHUNK     --read-chunk [2M]      THREADS compute threads [2]
#   CEIL_QD   queue depths of the ceiling [8,16]   CEIL_S  seconds per ceiling point [1]
#   CONFIGS   state:pilot list ["cold:off warm:off cold:on warm:on"]
#   KEEP      1: keep the model and store in WORK_DIR (reused by the next run)
set -euo pipefail
build=$1
work=$2
results=$3
bin=$build/src/cli/deltafin
drive_bench=$build/bench/store/bench_drive
SYNTH=${SYNTH:-"--arch deepseek_v3 --encoding mxfp4 --hidden 3584 --moe-inter 3072 --inter 1024 --experts 64 --top-k 8 --layers 5 --vocab 4096 --heads 8 --set q_lora_rank=256 --set kv_lora_rank=128 --set qk_nope_head_dim=64 --set qk_rope_head_dim=32 --set v_head_dim=64"}
BUDGET=${BUDGET:-1500M}
TOKENS=${TOKENS:-48}
PAIRS=${PAIRS:-5}
QD=${QD:-16}
CHUNK=${CHUNK:-2M}
THREADS=${THREADS:-2}
CEIL_QD=${CEIL_QD:-8,16}
CEIL_S=${CEIL_S:-1}
CONFIGS=${CONFIGS:-"cold:off warm:off cold:on warm:on"}
KEEP=${KEEP:-0}

[ -x "$bin" ] || { echo "no deltafin binary at $bin: build the deltafin target" >&2; exit 1; }
[ -x "$drive_bench" ] || { echo "no bench_drive at $drive_bench: build the bench_drive target" >&2; exit 1; }
mkdir -p "$work/runs"
rm -f "$work"/runs/*
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$work/model" "$work/store" "$work/drive0"; }
trap cleanup EXIT
log=$work/log.txt
: > "$log"
say() { echo "$*" | tee -a "$log" >&2; }

if [ ! -f "$work/store/manifest.json" ]; then
  rm -rf "$work/model" "$work/store" "$work/drive0"
  # shellcheck disable=SC2086
  "$bin" synth $SYNTH --out "$work/model" 2>>"$log"
  "$bin" pack --model "$work/model" --out "$work/store" --drives "$work/drive0" 2>>"$log"
fi
"$bin" inspect --model "$work/model" --json --threads 1 > "$work/inspect.json"
expert_bytes=$(jq .bytes_per_expert "$work/inspect.json")
data_file=$work/drive0/deltafin-experts.bin
heat=$work/store/heat.json

ceiling() {  # $1: json out. Best GB/s over the queue depths: {record: reads of one record, any: also pieces}
  local blocks=$expert_bytes
  [ "$CHUNK" != 0 ] && blocks=$expert_bytes,$CHUNK
  "$drive_bench" --file "$data_file" --blocks "$blocks" --qd "$CEIL_QD" --io uring --states warm \
    --seconds "$CEIL_S" --repeat 1 --json "$1" > /dev/null 2>>"$log"
  jq -c --argjson eb "$expert_bytes" '{record: ([.points[] | select(.block_bytes == $eb) | .GBps] | max), any: ([.points[].GBps] | max)}' "$1"
}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run() {  # $1 name, $2 state, $3 pilot
  local heat_flag=--no-heat-update
  if [ "$2" = cold ]; then
    drop
    rm -f "$heat"
  fi
  "$bin" generate --model "$work/store" --ram-budget "$BUDGET" --pilot "$3" --queue-depth "$QD" --read-chunk "$CHUNK" \
    --threads "$THREADS" --prompt-tokens 0 --max-tokens "$TOKENS" --ignore-eos $heat_flag \
    --stats-json "$work/runs/$1.json" > /dev/null 2>>"$log"
}

for cfg in $CONFIGS; do
  state=${cfg%%:*}
  pilot=${cfg##*:}
  if [ "$state" = warm ]; then  # the hot set: heat of one run of the same prompt
    rm -f "$heat"
    "$bin" generate --model "$work/store" --ram-budget "$BUDGET" --pilot "$pilot" --threads "$THREADS" \
      --prompt-tokens 0 --max-tokens "$TOKENS" --ignore-eos > /dev/null 2>>"$log"
  fi
  for i in $(seq 1 "$PAIRS"); do
    name=${state}_${pilot}_$i
    before=$(ceiling "$work/runs/$name.ceil_before.json")
    run "$name" "$state" "$pilot"
    after=$(ceiling "$work/runs/$name.ceil_after.json")
    jq --arg state "$state" --arg pilot "$pilot" --argjson before "$before" --argjson after "$after" \
      '. + {state: $state, pilot: $pilot, ceiling_before_GBps: $before.record, ceiling_after_GBps: $after.record,
            ceiling_any_before_GBps: $before.any, ceiling_any_after_GBps: $after.any,
            fraction: (.streaming.decode.read_GBps / (($before.record + $after.record) / 2)),
            fraction_strict: (.streaming.decode.read_GBps / (($before.any + $after.any) / 2))}' \
      "$work/runs/$name.json" > "$work/runs/$name.tmp" && mv "$work/runs/$name.tmp" "$work/runs/$name.json"
    say "$name: $(jq -c '{decode_tok_s, read: .streaming.decode.read_GBps, ceiling_before_GBps, ceiling_after_GBps, ceiling_any_before_GBps, ceiling_any_after_GBps, fraction, fraction_strict}' "$work/runs/$name.json")"
  done
done

# ---- report
commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD)
{
  echo
  echo "## read_fraction.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit"
  echo
  echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(grep MemTotal /proc/meminfo | xargs), kernel $(uname -r), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- disk: $(df -h "$work" | tail -1 | awk '{print $1" ("$2", mounted on "$6")"}')"
  echo "- model: \`deltafin synth $SYNTH\` ($(jq -r '"\(.layers) layers, \(.moe_layers) MoE x \(.experts_per_layer) experts, top-\(.experts_per_token), \(.expert_bytes) bytes of experts, \(.bytes_per_expert) per expert, spine \(.spine_bytes) bytes"' "$work/inspect.json"))"
  echo "- runs: \`deltafin generate --model STORE --ram-budget $BUDGET --queue-depth $QD --read-chunk $CHUNK --threads $THREADS --prompt-tokens 0 --max-tokens $TOKENS --ignore-eos --no-heat-update --pilot on|off\`; read GB/s = bytes read after the first token / decode seconds"
  echo "- ceiling: \`bench_drive --file STORE_DATA_FILE --blocks $expert_bytes,$CHUNK --qd $CEIL_QD --io uring --states warm --seconds $CEIL_S --repeat 1\` right before and right after each run. fraction = read GB/s / mean(before, after) of the best queue depth at the record's size ($expert_bytes bytes: the issue's definition); strict = the same over the best of both block sizes (the engine's own $CHUNK pieces included)"
  echo
  echo "| state | pilot | run | decode tok/s | read / token | read GB/s | ceiling before / after GB/s (record; best of both) | fraction (strict) | io_wait / decode s | pinned / cached / prefetched / missed | pilot recall | peak RSS |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for f in $(ls "$work"/runs/*_[0-9]*.json | grep -v ceil | sort -V); do
    jq -r --arg run "$(basename "$f" .json | sed 's/.*_//')" '
      ([.streaming.pilot[]? | .recall] | if length > 0 then (add / length * 100 | round | tostring) + " %" else "-" end) as $rec |
      .streaming.hit_rate as $h |
      "| \(.state) | \(.pilot) | \($run) | \(.decode_tok_s * 100 | round / 100) | \(.streaming.decode.bytes_read_per_token / 1e6 | round) MB | \(.streaming.decode.read_GBps * 100 | round / 100) | \(.ceiling_before_GBps * 100 | round / 100) / \(.ceiling_after_GBps * 100 | round / 100); \(.ceiling_any_before_GBps * 100 | round / 100) / \(.ceiling_any_after_GBps * 100 | round / 100) | \(.fraction * 100 | round) % (\(.fraction_strict * 100 | round) %) | \(.streaming.decode.io_wait_s * 100 | round / 100) / \(.decode_tokens / .decode_tok_s * 100 | round / 100) | \($h.pinned * 100 | round) / \($h.cached * 100 | round) / \($h.prefetched * 100 | round) / \($h.missed * 100 | round) % | \($rec) | \(.peak_rss_bytes / 1e6 | round) MB |"' "$f"
  done
  echo
  echo "| state | pilot | median decode tok/s | median read GB/s | median fraction of the ceiling (record size) | min-max | median strict fraction (best block size) | min-max |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  for cfg in $CONFIGS; do
    state=${cfg%%:*}
    pilot=${cfg##*:}
    jq -r -s --arg s "$state" --arg p "$pilot" '
      def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
      "| \($s) | \($p) | \(map(.decode_tok_s) | med * 100 | round / 100) | \(map(.streaming.decode.read_GBps) | med * 100 | round / 100) | \(map(.fraction) | med * 100 | round) % | \(map(.fraction) | min * 100 | round)-\(map(.fraction) | max * 100 | round) % | \(map(.fraction_strict) | med * 100 | round) % | \(map(.fraction_strict) | min * 100 | round)-\(map(.fraction_strict) | max * 100 | round) % |"' \
      $(ls "$work"/runs/"${state}_${pilot}"_[0-9]*.json | grep -v ceil)
  done
  echo
  echo "<details><summary>Log</summary>"
  echo
  echo '```'
  grep -v '^synth:\|^pack:' "$log" | tr '\r' '\n' | grep -v '^\(synth\|pack\): [0-9]' || true
  echo '```'
  echo "</details>"
} >> "$results"
