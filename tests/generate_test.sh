#!/usr/bin/env bash
# End to end: `deltafin generate --prompt TEXT` on the demo model tokenizes
# like transformers (BOS included) and its greedy continuation equals the
# transformers float64 reference (tests/fixtures/demo_moe/reference.json),
# resident and through a store under a small RAM budget.
# Usage: generate_test.sh DELTAFIN_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
ref=$src/tests/fixtures/demo_moe/reference.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
want=$(node -e 'const r=require(process.argv[1]); console.log(JSON.stringify(r.greedy[0].generated))' "$ref")
n=$(node -e 'const r=require(process.argv[1]); console.log(r.greedy[0].generated.length)' "$ref")
"$bin" pack --model "$src/models/demo-moe" --out "$work/store" --drives "$work/d1,$work/d2" 2>/dev/null
for model in "$src/models/demo-moe" "$work/store --ram-budget 26M --ctx-size 256 --no-heat-update"; do
  # shellcheck disable=SC2086
  out=$("$bin" generate --model $model --prompt "The state of the Union is" --max-tokens "$n" --temperature 0 \
        --ignore-eos --json)
  got=$(node -e 'const j=JSON.parse(process.argv[1]); console.log(JSON.stringify(j.tokens))' "$out")
  echo "$model: got $got, transformers $want"
  [ "$got" = "$want" ] || { echo "FAIL: greedy tokens differ from the reference"; exit 1; }
done
# --ctx-size: generation stops when the sequence fills it; a longer prompt is refused.
out=$("$bin" generate --model "$src/models/demo-moe" --prompt "The state of the Union is" --max-tokens 20 \
      --temperature 0 --ignore-eos --ctx-size 10 --json 2>"$work/err")
got=$(node -e 'const j=JSON.parse(process.argv[1]); console.log(j.tokens.length + j.prompt_tokens)' "$out")
[ "$got" = 11 ] || { echo "FAIL: --ctx-size 10 gave $got prompt + generated tokens, expected 11"; exit 1; }
grep -q "filled --ctx-size 10" "$work/err" || { echo "FAIL: no message when the context filled"; exit 1; }
if "$bin" generate --model "$src/models/demo-moe" --prompt "The state of the Union is" --max-tokens 4 --ctx-size 3 \
    2>"$work/err"; then
  echo "FAIL: a prompt longer than --ctx-size was accepted"; exit 1
fi
grep -q "more than --ctx-size 3" "$work/err" || { echo "FAIL: unclear error: $(cat "$work/err")"; exit 1; }
echo "generate: --ctx-size stops and refuses as it should"
