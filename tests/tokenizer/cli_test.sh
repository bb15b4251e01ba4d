#!/usr/bin/env bash
# `deltafin tokenize` / `detokenize` on the demo model's tokenizer: JSON
# output, the round trip through both commands, standard input, and one-line
# errors with a non-zero exit.
#   cli_test.sh DELTAFIN_BIN MODEL_DIR
set -uo pipefail
bin=$1
model=$2
fail=0
check() {  # NAME GOT WANT
  if [[ "$2" != "$3" ]]; then echo "FAIL $1: got [$2] want [$3]"; fail=1; else echo "ok $1"; fi
}
text=$'Hello, world!\n  Ünïcödé 😀 and 12345 tabs\tend'
json=$("$bin" tokenize --model "$model" --text "$text" --json 2>/dev/null)
[[ $json =~ ^\[[0-9]+(,[0-9]+)*\]$ ]] && echo "ok json is an array of ids" || { echo "FAIL json: $json"; fail=1; }
ids=$("$bin" tokenize --model "$model" --text "$text" 2>/dev/null)
check "json and plain ids agree" "[$ids]" "$json"
back=$("$bin" detokenize --model "$model" --tokens "$ids"; printf x)
check "detokenize(tokenize(x)) == x" "${back%x}" "$text"
from_stdin=$(printf '%s' "$text" | "$bin" tokenize --model "$model" 2>/dev/null)
check "stdin equals --text" "$from_stdin" "$ids"
err=$("$bin" detokenize --model "$model" --tokens 1,99999999 2>&1 >/dev/null); rc=$?
check "bad id exit code" "$rc" "1"
[[ $(printf '%s\n' "$err" | wc -l) == 1 && $err == *99999999* ]] && echo "ok bad id message: $err" || { echo "FAIL message: $err"; fail=1; }
err=$("$bin" tokenize --model /nonexistent --text x 2>&1 >/dev/null); rc=$?
check "missing model exit code" "$rc" "1"
[[ $err == *"/nonexistent"* ]] && echo "ok missing model message: $err" || { echo "FAIL message: $err"; fail=1; }
[[ $fail == 0 ]] && echo "cli_test: passed" || echo "cli_test: FAILED"
exit $fail
