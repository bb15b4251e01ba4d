#!/usr/bin/env bash
# Peak resident memory of a streaming run stays under --ram-budget (which
# counts the spine, the fixed overhead and the expert slots), and, where a
# cgroup v1 memory controller is writable (root), the same run completes with
# the cgroup's limit set to the budget (page cache charged too).
# Usage: streaming_memory_test.sh DELTAFIN_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
cg=""
cleanup() {
  rm -rf "$work"
  if [ -n "$cg" ]; then rmdir "$cg" 2>/dev/null || true; fi
}
trap cleanup EXIT
"$bin" pack --model "$src/models/demo-moe" --out "$work/store" --drives "$work/d1,$work/d2" 2>/dev/null
budget=$((30 * 1024 * 1024))
run() {
  "$bin" generate --model "$work/store" --ram-budget "$budget" --prompt-tokens 0,2590,1163,272,264,1212,330 \
    --max-tokens 48 --ignore-eos --no-heat-update --threads 2 --stats-json "$1" >/dev/null
}
run "$work/stats.json"
peak=$(grep -o '"peak_rss_bytes": *[0-9]*' "$work/stats.json" | grep -o '[0-9]*$')
reads=$(grep -o '"records_read": *[0-9]*' "$work/stats.json" | grep -o '[0-9]*$')
echo "peak RSS $peak bytes with --ram-budget $budget; $reads records streamed"
if [ "$peak" -gt "$budget" ]; then
  echo "FAIL: peak resident memory is over the budget"
  exit 1
fi
if [ "$reads" -le 0 ]; then
  echo "FAIL: nothing was streamed; the test measures nothing"
  exit 1
fi
mem=/sys/fs/cgroup/memory
if [ "$(id -u)" = 0 ] && [ -w "$mem" ] && mkdir "$mem/deltafin-test-$$" 2>/dev/null; then
  cg="$mem/deltafin-test-$$"
  echo "$budget" > "$cg/memory.limit_in_bytes"
  if ! (echo "$BASHPID" > "$cg/cgroup.procs" && run "$work/stats-cg.json"); then
    echo "FAIL: the run did not complete under a cgroup memory limit of $budget bytes"
    exit 1
  fi
  echo "under a cgroup limit of $budget bytes: completed, max usage $(cat "$cg/memory.max_usage_in_bytes") bytes (page cache included)"
else
  echo "cgroup v1 memory controller not writable here: checked peak RSS only"
fi
