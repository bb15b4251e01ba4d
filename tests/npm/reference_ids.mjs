// Reference token ids and decodings from Hugging Face tokenizers (npm
// "tokenizers", the library's official binding).
//   node reference_ids.mjs TOKENIZER.json CORPUS.jsonl OUT.jsonl
// OUT has one line per corpus line: {"ids": [...], "text": decode(ids)}.
import fs from 'node:fs';
import tk from 'tokenizers';

const [tokPath, corpusPath, outPath] = process.argv.slice(2);
if (!outPath) { console.error('usage: node reference_ids.mjs TOKENIZER.json CORPUS.jsonl OUT.jsonl'); process.exit(2); }
const tok = tk.Tokenizer.fromFile(tokPath);
const lines = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length);
const out = [];
let n = 0;
for (const line of lines) {
  const text = JSON.parse(line);
  const enc = await tok.encode(text, null, { addSpecialTokens: false });
  const ids = enc.getIds();
  n += ids.length;
  out.push(JSON.stringify({ ids, text: await tok.decode(ids, false) }));
}
fs.writeFileSync(outPath, out.join('\n') + '\n');
console.log(`${tokPath}: ${lines.length} documents, ${n} tokens -> ${outPath}`);
