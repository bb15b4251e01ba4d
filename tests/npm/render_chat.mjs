// Reference chat renderings from @huggingface/jinja.
//   node render_chat.mjs TEMPLATES.json CASES.json OUT.json
// TEMPLATES.json: [{"name", "model_dir"}] (tokenizer_config.json's
// chat_template, bos_token, eos_token) or [{"name", "file", "bos", "eos"}].
// CASES.json: [{"name", "messages", "tools"?, "add_generation_prompt", "extra"?,
// "only"?: [template names]}].
// OUT.json: [{"template", "case", "text"} or {"template", "case", "error"}].
import fs from 'node:fs';
import path from 'node:path';
import { Template } from '@huggingface/jinja';

const [tmplPath, casesPath, outPath] = process.argv.slice(2);
if (!outPath) { console.error('usage: node render_chat.mjs TEMPLATES.json CASES.json OUT.json'); process.exit(2); }
const content = (t) => (t == null ? '' : typeof t === 'string' ? t : t.content ?? '');
const templates = JSON.parse(fs.readFileSync(tmplPath, 'utf8')).map((t) => {
  if (t.model_dir) {
    const cfg = JSON.parse(fs.readFileSync(path.join(t.model_dir, 'tokenizer_config.json'), 'utf8'));
    return { name: t.name, source: cfg.chat_template, bos: content(cfg.bos_token), eos: content(cfg.eos_token) };
  }
  return { name: t.name, source: fs.readFileSync(t.file, 'utf8'), bos: t.bos ?? '', eos: t.eos ?? '' };
});
const cases = JSON.parse(fs.readFileSync(casesPath, 'utf8'));
const out = [];
for (const t of templates) {
  const tmpl = new Template(t.source);
  for (const c of cases) {
    if (c.only && !c.only.includes(t.name)) continue;
    const vars = { messages: c.messages, add_generation_prompt: c.add_generation_prompt,
      bos_token: t.bos, eos_token: t.eos, tools: c.tools && c.tools.length ? c.tools : null, ...(c.extra ?? {}) };
    try {
      out.push({ template: t.name, case: c.name, text: tmpl.render(vars) });
    } catch (e) {
      out.push({ template: t.name, case: c.name, error: String(e.message ?? e) });
    }
  }
}
fs.writeFileSync(outPath, JSON.stringify(out, null, 1));
console.log(`${templates.length} templates x ${cases.length} conversations -> ${outPath}`);
