// Builds the mixed-text corpus for the tokenizer reference tests: one JSON
// string per line (a "document"), at least 1 MiB of UTF-8 in all, from text
// that ships with Debian packages (licenses, copyright files, man pages in
// several languages, message catalogs in many scripts, C/C++ headers) plus
// tests/tokenizer/snippets.json, with special tokens inserted into some
// documents. Deterministic for a given set of installed files.
//   node make_corpus.mjs OUT.jsonl
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const out = process.argv[2];
if (!out) { console.error('usage: node make_corpus.mjs OUT.jsonl'); process.exit(2); }
const here = path.dirname(new URL(import.meta.url).pathname);
const docs = [];
const CHUNK = 6000;

// Splits text into documents of at most CHUNK bytes at line ends.
function addText(text) {
  let cur = '';
  for (const line of text.split(/(?<=\n)/)) {
    if (cur.length + line.length > CHUNK && cur) { docs.push(cur); cur = ''; }
    cur += line;
  }
  if (cur) docs.push(cur);
}
function listSorted(dir) { try { return fs.readdirSync(dir).sort(); } catch { return []; } }
function readText(p) {
  let b = fs.readFileSync(p);
  if (p.endsWith('.gz')) b = zlib.gunzipSync(b);
  return new TextDecoder('utf-8', { fatal: false }).decode(b);
}
function addCapped(files, cap) {
  let n = 0;
  for (const f of files) {
    if (n >= cap) break;
    try {
      const t = readText(f).slice(0, cap - n);
      addText(t);
      n += t.length;
    } catch { /* unreadable: skip */ }
  }
  return n;
}
// Translated strings of a GNU .mo catalog.
function moStrings(p) {
  const b = fs.readFileSync(p);
  if (b.length < 28) return [];
  let le = b.readUInt32LE(0) === 0x950412de;
  const u32 = (o) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const n = u32(8), toff = u32(16), res = [];
  for (let i = 0; i < n && i < 400; i++) {
    const len = u32(toff + 8 * i), off = u32(toff + 8 * i + 4);
    if (off + len <= b.length && len > 0) res.push(b.subarray(off, off + len).toString('utf8'));
  }
  return res;
}

// 1. Licenses (English legal prose).
addCapped(listSorted('/usr/share/common-licenses').map((f) => `/usr/share/common-licenses/${f}`), 200000);
// 2. Copyright files of installed packages.
addCapped(listSorted('/usr/share/doc').map((d) => `/usr/share/doc/${d}/copyright`).filter((p) => fs.existsSync(p)), 150000);
// 3. Man pages in every language present (troff source).
for (const lang of listSorted('/usr/share/man')) {
  const dirs = lang.startsWith('man') ? [`/usr/share/man/${lang}`] :
    listSorted(`/usr/share/man/${lang}`).map((s) => `/usr/share/man/${lang}/${s}`);
  const files = dirs.flatMap((d) => listSorted(d).map((f) => `${d}/${f}`));
  addCapped(files, lang.startsWith('man') ? 10000 : 7000);
}
// 4. Message catalogs: translations in many scripts.
for (const loc of listSorted('/usr/share/locale')) {
  const dir = `/usr/share/locale/${loc}/LC_MESSAGES`;
  let text = '';
  for (const f of listSorted(dir)) {
    if (!f.endsWith('.mo')) continue;
    try { text += moStrings(`${dir}/${f}`).join('\n') + '\n'; } catch { /* skip */ }
    if (text.length > 6000) break;
  }
  if (text) addText(text.slice(0, 6000));
}
// 5. Source code: C and C++ headers.
addCapped(['/usr/include/stdio.h', '/usr/include/stdlib.h', '/usr/include/string.h', '/usr/include/pcre2.h',
  '/usr/include/utf8proc.h', '/usr/include/nlohmann/json.hpp', '/usr/include/CLI/App.hpp',
  '/usr/include/fmt/format.h'].filter((p) => fs.existsSync(p)), 120000);
// 6. Hand-written multilingual / emoji / edge-case snippets, alone and glued.
const snippets = JSON.parse(fs.readFileSync(path.join(here, '../tokenizer/snippets.json'), 'utf8'));
for (const s of snippets) docs.push(s);
docs.push(snippets.join(''));
docs.push(snippets.join('\n\n'));
// 7. Whitespace runs and numbers, built deterministically.
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const ws = [' ', '  ', '\t', '\n', '\r\n', '   \n', '\u00a0', '\u3000', '\n\n\n', '        '];
for (let d = 0; d < 40; d++) {
  let t = '';
  for (let i = 0; i < 200; i++) {
    const k = rnd(4);
    if (k === 0) t += ws[rnd(ws.length)].repeat(1 + rnd(6));
    else if (k === 1) t += String(rnd(2147483647)) + (rnd(3) === 0 ? '.' + rnd(1000) : '');
    else if (k === 2) t += Array.from(snippets[rnd(snippets.length)]).slice(0, 1 + rnd(40)).join('');
    else t += ' '.repeat(rnd(100));
  }
  docs.push(t);
}
// 8. Special tokens inside text (both tokenizers' families) in every 7th document.
const specials = ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>',
  '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>', '<｜Assistant｜>', '<|im_start|>system\n'];
for (let i = 0; i < docs.length; i += 7) {
  const d = docs[i];
  const cps = Array.from(d);
  for (let k = 0; k < 3 && cps.length; k++) cps.splice(rnd(cps.length + 1), 0, specials[rnd(specials.length)]);
  docs[i] = cps.join('');
}

const body = docs.map((d) => JSON.stringify(d)).join('\n') + '\n';
fs.writeFileSync(out, body);
const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d, 'utf8'), 0);
console.log(`corpus: ${docs.length} documents, ${bytes} bytes of text -> ${out}`);
if (bytes < 1048576) { console.error(`corpus too small (${bytes} < 1 MiB)`); process.exit(1); }
