#!/usr/bin/env bash
# Decode speed over 1-4 emulated drives (shared/MEASURING.md): each drive is a
# loop device (direct I/O) over a sparse file with its own ext4, read-capped
# by the cgroup v1 blkio controller; the store is striped over the first D of
# them and `deltafin generate` runs inside the capping cgroup. Also measures
# one drive's ceiling (bench_drive, same cgroup) at the expert size.
# Tears down everything it creates (mounts, loop devices, cgroup, files).
# Needs root. Usage: drive_scaling.sh BUILD_DIR WORK_DIR RESULTS_MD
# Environment: BPS read cap per drive [250000000], TOKENS [16], BUDGET [400M],
#   PLACEMENT stripe|mirror [stripe] (mirror: every record on every drive, read
#   from the drive expected to finish first or split across two)
set -euo pipefail
build=$1
work=$2
results=$3
bin=$build/src/cli/deltafin
drive_bench=$build/bench/store/bench_drive
BPS=${BPS:-250000000}
TOKENS=${TOKENS:-16}
BUDGET=${BUDGET:-400M}
PLACEMENT=${PLACEMENT:-stripe}
SYNTH="--arch deepseek_v3 --encoding mxfp4 --hidden 3584 --moe-inter 3072 --inter 1024 --experts 32 --top-k 8 --layers 3 --vocab 4096 --heads 8 --set n_shared_experts=0 --set q_lora_rank=256 --set kv_lora_rank=128 --set qk_nope_head_dim=64 --set qk_rope_head_dim=32 --set v_head_dim=64"
[ "$(id -u)" = 0 ] || { echo "drive_scaling.sh needs root (loop devices, mounts, blkio cgroup)" >&2; exit 1; }
mkdir -p "$work"
cg=/sys/fs/cgroup/blkio/deltafin-scaling-$$
devs=()
cleanup() {
  for i in 1 2 3 4; do
    mountpoint -q "$work/mnt$i" 2>/dev/null && umount "$work/mnt$i"
  done
  for d in "${devs[@]}"; do losetup -d "$d" 2>/dev/null || true; done
  [ -d "$cg" ] && rmdir "$cg" 2>/dev/null || true
  rm -rf "$work/model" "$work"/d?.img "$work"/mnt? "$work"/*.json.tmp
}
trap cleanup EXIT
mkdir "$cg"
for i in 1 2 3 4; do
  truncate -s 3G "$work/d$i.img"
  dev=$(losetup -f --show --direct-io=on "$work/d$i.img")
  devs+=("$dev")
  mkfs.ext4 -q "$dev"
  mkdir -p "$work/mnt$i"
  mount "$dev" "$work/mnt$i"
  echo "$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ') $BPS" > "$cg/blkio.throttle.read_bps_device"
done
"$bin" synth $SYNTH --out "$work/model" --quiet
in_cg() { (echo "$BASHPID" > "$cg/cgroup.procs"; exec "$@"); }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
rows=()
for D in 1 2 3 4; do
  drives=""
  for i in $(seq 1 "$D"); do drives+="${drives:+,}$work/mnt$i/s$D"; done
  "$bin" pack --model "$work/model" --out "$work/store$D" --drives "$drives" --placement "$PLACEMENT" 2>/dev/null
  if [ "$D" = 1 ]; then
    drop
    in_cg "$drive_bench" --file "$work/mnt1/s1/deltafin-experts.bin" --blocks 17547264 --qd 4,16 --io uring \
      --states cold --seconds 1 --repeat 3 --json "$work/ceiling1.json" > /dev/null 2>&1
  fi
  drop
  in_cg "$bin" generate --model "$work/store$D" --ram-budget "$BUDGET" --pilot off --threads 2 --prompt-tokens 0 \
    --max-tokens "$TOKENS" --ignore-eos --no-heat-update --stats-json "$work/scale$D.json" > /dev/null 2>&1
  rows+=("$(jq -r --arg d "$D" '"| \($d) | \(.decode_tok_s * 100 | round / 100) | \(.streaming.bytes_read_per_token / 1e6 | round) MB | \(.streaming.io_wait_s * 100 | round / 100) s of \(.decode_tokens / .decode_tok_s * 100 | round / 100) s | \([.streaming.drives[].bytes_read / 1e9 * 100 | round / 100] | map(tostring) | join(" / ")) GB |"' "$work/scale$D.json")")
  echo "${rows[-1]}" >&2
  rm -rf "$work/store$D" "$work"/mnt?/s"$D"
done
{
  echo
  echo "## drive_scaling.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), placement $PLACEMENT, commit $(git -C "$(dirname "$0")" rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "- model: \`deltafin synth $SYNTH\`; budget $BUDGET; stores ($PLACEMENT) over D loop devices (direct I/O, ext4), each read-capped at $BPS bytes/s by blkio; \`generate --pilot off --threads 2 --prompt-tokens 0 --max-tokens $TOKENS --ignore-eos --no-heat-update\` cold (drop_caches) inside the capping cgroup"
  echo "- one capped drive's ceiling (bench_drive, same cgroup, 17,547,264-byte reads, cold, median of 3): $(jq -r '[.points[] | "qd \(.queue_depth): \(.GBps * 100 | round / 100) GB/s"] | join(", ")' "$work/ceiling1.json")"
  echo
  echo "| drives | decode tok/s | bytes read / token | io_wait / decode | bytes per drive |"
  echo "|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
} >> "$results"
