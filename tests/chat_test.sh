#!/usr/bin/env bash
# `deltafin chat` on the demo model: history commands work, and Ctrl-C
# (SIGINT) during an answer stops that answer, not the program.
# Usage: chat_test.sh DELTAFIN_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
model=$2/models/demo-moe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$(printf 'Tell me about the Union.\n/reset\nWhat is a whale?\n/nonsense\n/exit\n' |
      "$bin" chat --model "$model" --max-tokens 12 --temperature 0 --threads 1)
echo "$out"
grep -q "(history cleared)" <<<"$out" || { echo "FAIL: /reset did not answer"; exit 1; }
grep -q "unknown command /nonsense" <<<"$out" || { echo "FAIL: unknown commands are not reported"; exit 1; }
[ "$(wc -l <<<"$out")" -ge 4 ] || { echo "FAIL: expected two answers"; exit 1; }
# --ctx-size: an answer stops when the context is full, and a turn that
# cannot fit is refused with a message, without ending the chat.
out=$(printf 'Tell me about the Union.\nAnd more?\n/exit\n' |
      "$bin" chat --model "$model" --max-tokens 40 --temperature 0 --threads 1 --ctx-size 40)
echo "$out"
grep -q "\[context full" <<<"$out" || { echo "FAIL: a full context did not stop the answer"; exit 1; }
grep -q "and --ctx-size is 40" <<<"$out" || { echo "FAIL: a turn past --ctx-size was not refused"; exit 1; }
# SIGINT in the middle of a long answer: the answer stops, the chat goes on.
mkfifo "$work/in"
trap "" PIPE
"$bin" chat --model "$model" --max-tokens 100000 --ignore-eos --temperature 0.8 --threads 1 <"$work/in" >"$work/out" 2>&1 &
pid=$!
exec 3>"$work/in"
echo "Tell me a very long story." >&3
# Wait until the answer is streaming (at least 200 bytes out), then interrupt.
for _ in $(seq 1 300); do
  [ "$(stat -c %s "$work/out")" -ge 200 ] && break
  sleep 0.1
done
kill -INT "$pid"
sleep 0.5
echo "/exit" >&3
exec 3>&-
rc=0
wait "$pid" || rc=$?
cat "$work/out" | tail -c 300
echo
grep -q "\[stopped\]" "$work/out" || { echo "FAIL: Ctrl-C did not stop the answer"; exit 1; }
[ "$rc" = 0 ] || { echo "FAIL: chat exited with $rc after Ctrl-C"; exit 1; }
echo "chat: commands and Ctrl-C behave"
