// Reference ids for the tiktoken-format tokenizer of make_tiktoken.mjs, from
// js-tiktoken (npm) with Kimi K2's split pattern written in JavaScript regex
// syntax: fancy-regex's [A&&[^\p{Han}]] as a look-ahead, \p{Han} as Script_Extensions
// (what both Rust's regex and PCRE2 mean by a bare script name), (?i:'s|...) spelled
// out, and \s / \S as Unicode White_Space (what Rust's and PCRE2's \s mean;
// JavaScript's \s also takes U+FEFF).
//   node reference_tiktoken.mjs MODEL_DIR CORPUS.jsonl OUT.jsonl
import fs from 'node:fs';
import path from 'node:path';
import { Tiktoken } from 'js-tiktoken/lite';

const [dir, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) { console.error('usage: node reference_tiktoken.mjs MODEL_DIR CORPUS.jsonl OUT.jsonl'); process.exit(2); }
const WS = '\\t\\n\\v\\f\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const s = `[${WS}]`, S = `[^${WS}]`;
const upper = '(?:(?!\\p{Script_Extensions=Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])';
const lower = '(?:(?!\\p{Script_Extensions=Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])';
const suffix = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?";
const pat = [
  '[\\p{Script_Extensions=Han}]+',
  `[^\\r\\n\\p{L}\\p{N}]?${upper}*${lower}+${suffix}`,
  `[^\\r\\n\\p{L}\\p{N}]?${upper}+${lower}*${suffix}`,
  '\\p{N}{1,3}',
  ` ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*`,
  `${s}*[\\r\\n]+`,
  `${s}+(?!${S})`,
  `${s}+`,
].join('|');

const bpe = fs.readFileSync(path.join(dir, 'tiktoken.model'), 'utf8').split('\n').filter(Boolean)
  .map((l) => { const [tok, rank] = l.split(' '); return `! ${rank} ${tok}`; }).join('\n');
const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
const special = {};
for (const [id, t] of Object.entries(cfg.added_tokens_decoder)) special[t.content] = Number(id);
const enc = new Tiktoken({ bpe_ranks: bpe, special_tokens: special, pat_str: pat });

const lines = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length);
const out = [];
let n = 0;
for (const line of lines) {
  const text = JSON.parse(line);
  const ids = enc.encode(text, 'all');
  n += ids.length;
  out.push(JSON.stringify({ ids, text: enc.decode(ids) }));
}
fs.writeFileSync(outPath, out.join('\n') + '\n');
console.log(`${dir} (js-tiktoken): ${lines.length} documents, ${n} tokens -> ${outPath}`);
