#!/usr/bin/env python3
"""Float64 reference for Kimi K3's text model, and the tiny K3 fixtures.

transformers has no Kimi K3: the checkpoint ships its own modeling code
(moonshotai/Kimi-K3, modeling_kimi_linear.py, trust_remote_code). This file
re-states that code's forward pass in float64 PyTorch, function by function:

  AttnRes      _apply_attn_res: softmax over [blocks..., prefix_sum] of
               RMS-normalised (no weight, eps rms_norm_eps) streams scored by
               norm.weight * proj.weight; output = sum p_i v_i (un-normalised).
               Blocks are written at layers l % attn_res_block_size == 0.
  KDA          KimiDeltaAttention: q/k/v short causal convs + SiLU, gate
               g = lower_bound * sigmoid(exp(A_log[h]) * (f_b(f_a x) + dt_bias))
               with one A_log value PER HEAD (fla's kernels read A_log + i_h;
               the stored tensor is [head_dim] with entries >= heads zero),
               beta = sigmoid(b_proj x), l2-normalised q (x dk^-0.5) and k
               (eps 1e-6), delta rule, o_norm (eps rms_norm_eps) * sigmoid(g_proj x).
               Recurrent form (the chunked form is the same function).
  MLA          KimiMLAAttention: no positional encoding, q_a/kv_a layernorms
               with KimiRMSNorm's default eps 1e-6, softmax scale
               (nope+rope)^-0.5, out *= sigmoid(g_proj x) (mla_use_output_gate).
  MoE          KimiMoEGate (sigmoid + e_score_correction_bias, top-k,
               renormalised + 1e-20, routed_scaling_factor) and
               KimiSparseMoeBlock with the latent projections:
               up(RMSN(sum_k w_k expert_k(down x), routed_expert_norm)) + shared(x).
  SiTU         SituAndMul: beta tanh(g/beta) sigmoid(g) * lb tanh(u/lb).

With K3's options off (no attn_res_block_size, silu, no latent MoE, softplus
gate, low-rank KDA output gate, no MLA output gate) the same functions are
transformers' kimi_linear; --crosscheck runs transformers' kimi_linear on a
kimi_linear fixture and compares every KDA and MLA layer's output and the
logits with these functions.

Fixtures (format: docs/fixtures.md) are written in K3's published layout:
config.json with model_type "kimi_k3" and a text_config of type
"kimi_linear" (quantization_config inside it, as published), tensors
prefixed "language_model.", routed experts as compressed-tensors
mxfp4-pack-quantized (weight_packed U8 + weight_scale U8 E8M0), a few
vision_tower / mm_projector tensors in a second shard. The reference is
computed from the tensors read back from disk (MXFP4 decoded by transformers'
own GPT-OSS decoder).

Needs torch, transformers 5.x, safetensors, numpy (make_fixtures.py's helpers
are imported). From the repository root:
    PYTHONUNBUFFERED=1 python3 tools/k3_reference.py --out /tmp/fx \\
        --crosscheck tests/fixtures/kimi_linear_bf16
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (MXFP4 codec, checkpoint I/O, tie checks, constants)
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

F64 = torch.float64
PREFIX = "language_model."

# --------------------------------------------------------------------------------------
# The forward pass.
# --------------------------------------------------------------------------------------


class TextConfig:
    """The text_config fields the forward pass reads, with the official defaults."""

    def __init__(self, c):
        self.c = c
        self.L, self.H, self.V = c["num_hidden_layers"], c["hidden_size"], c["vocab_size"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        la = c.get("linear_attn_config") or {}
        self.kda_layers = {i - 1 for i in (la.get("kda_layers") or [])}
        self.kda_heads, self.kda_dim = la.get("num_heads"), la.get("head_dim")
        self.conv_k = la.get("short_conv_kernel_size", 4)
        self.gate_lower_bound = la.get("gate_lower_bound")
        self.full_rank_gate = la.get("use_full_rank_gate", False)
        self.mla_heads = c["num_attention_heads"]
        self.q_lora, self.kv_lora = c.get("q_lora_rank"), c["kv_lora_rank"]
        self.nope, self.rope, self.vdim = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.mla_out_gate = c.get("mla_use_output_gate", False)
        self.E, self.K = c.get("num_experts"), c.get("num_experts_per_token")
        self.n_shared = c.get("num_shared_experts")
        self.moe_inter, self.dense_inter = c.get("moe_intermediate_size"), c["intermediate_size"]
        self.first_dense, self.moe_freq = c.get("first_k_dense_replace", 0), c.get("moe_layer_freq", 1)
        self.renorm, self.scaling = c.get("moe_renormalize", True), c.get("routed_scaling_factor", 1.0)
        self.n_group, self.topk_group = c.get("num_expert_group", 1), c.get("topk_group", 1)
        self.latent, self.latent_norm = c.get("routed_expert_hidden_size"), c.get("latent_moe_use_norm", False)
        self.act = c.get("hidden_act", "silu")
        self.situ_beta = c.get("activation_situ_beta") or 1.0  # _get_situ_activation_params
        self.situ_linear_beta = c.get("activation_situ_linear_beta")
        self.attn_res = c.get("attn_res_block_size")
        self.variant = set()  # deliberate deviations, to show what a fixture detects

    def is_moe(self, l):
        return self.E is not None and l >= self.first_dense and l % self.moe_freq == 0


def lin(W, name, x):
    return x @ W[name + ".weight"].T


def rmsnorm(x, w, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else w * y


def l2norm(x, eps=1e-6):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def glu(cfg, g, u):
    if cfg.act == "situ" and "silu_for_situ" not in cfg.variant:
        b, lb = cfg.situ_beta, cfg.situ_linear_beta
        a = b * torch.tanh(g / b) * torch.sigmoid(g)
        return a * (lb * torch.tanh(u / lb) if lb is not None else u)
    return F.silu(g) * u


def mlp(W, p, x, cfg, gate="gate_proj", up="up_proj", down="down_proj"):
    return lin(W, p + down, glu(cfg, lin(W, p + gate, x), lin(W, p + up, x)))


def short_conv(x, w):
    """Depthwise causal conv1d + SiLU. x [T, D], w [D, 1, K]; tap K-1 is the current token."""
    T, D = x.shape
    w = w.reshape(D, -1)
    K = w.shape[1]
    xp = torch.cat([x.new_zeros(K - 1, D), x], 0)
    out = torch.zeros_like(x)
    for j in range(K):
        out = out + xp[j : j + T] * w[:, j]
    return F.silu(out)


def kda(W, p, x, cfg):
    """KimiDeltaAttention on x [T, H] from a zero state."""
    T, nh, dk = x.shape[0], cfg.kda_heads, cfg.kda_dim
    q = short_conv(lin(W, p + "q_proj", x), W[p + "q_conv1d.weight"]).view(T, nh, dk)
    k = short_conv(lin(W, p + "k_proj", x), W[p + "k_conv1d.weight"]).view(T, nh, dk)
    v = short_conv(lin(W, p + "v_proj", x), W[p + "v_conv1d.weight"]).view(T, nh, dk)
    z = lin(W, p + "f_b_proj", lin(W, p + "f_a_proj", x)).view(T, nh, dk) + W[p + "dt_bias"].view(nh, dk)
    A = W[p + "A_log"].reshape(-1)
    if "a_log_per_channel" in cfg.variant:  # the bug one engine has: A_log[d] for channel d
        decay = A[:dk].exp().view(1, dk)
    else:  # fla: one value per head, A_log[h]
        decay = A[:nh].exp().view(nh, 1)
    if cfg.gate_lower_bound is not None and "softplus_gate" not in cfg.variant:
        g = cfg.gate_lower_bound * torch.sigmoid(decay * z)
    else:
        g = -decay * F.softplus(z)
    beta = torch.sigmoid(lin(W, p + "b_proj", x))  # [T, nh]
    q = l2norm(q) * dk**-0.5
    k = l2norm(k)
    S = x.new_zeros(nh, dk, dk)  # [head, key channel, value channel]
    o = x.new_zeros(T, nh, dk)
    for t in range(T):
        S = S * g[t].exp()[..., None]
        u = torch.einsum("hkv,hk->hv", S, k[t])
        S = S + k[t][..., None] * (beta[t][:, None] * (v[t] - u))[:, None, :]
        o[t] = torch.einsum("hkv,hk->hv", S, q[t])
    if cfg.full_rank_gate:
        og = lin(W, p + "g_proj", x)
    else:
        og = lin(W, p + "g_b_proj", lin(W, p + "g_a_proj", x))
    o = rmsnorm(o, W[p + "o_norm.weight"], cfg.eps) * torch.sigmoid(og.view(T, nh, dk))
    return lin(W, p + "o_proj", o.reshape(T, nh * dk))


def mla(W, p, x, cfg):
    """KimiMLAAttention (NoPE), causal, on x [T, H]."""
    T, nh, nope, rope, vd, kvl = x.shape[0], cfg.mla_heads, cfg.nope, cfg.rope, cfg.vdim, cfg.kv_lora
    eps = 1e-5 if "mla_norm_eps_1e-5" in cfg.variant else 1e-6  # KimiRMSNorm's default
    if cfg.q_lora:
        q = lin(W, p + "q_b_proj", rmsnorm(lin(W, p + "q_a_proj", x), W[p + "q_a_layernorm.weight"], eps))
    else:
        q = lin(W, p + "q_proj", x)
    q = q.view(T, nh, nope + rope)
    c = lin(W, p + "kv_a_proj_with_mqa", x)
    ckv = rmsnorm(c[:, :kvl], W[p + "kv_a_layernorm.weight"], eps)
    kr = c[:, kvl:]
    kv = lin(W, p + "kv_b_proj", ckv).view(T, nh, nope + vd)
    key = torch.cat([kv[..., :nope], kr[:, None, :].expand(T, nh, rope)], -1)
    s = torch.einsum("thd,shd->hts", q, key) * (nope + rope) ** -0.5
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    o = torch.einsum("hts,shv->thv", s.softmax(-1), kv[..., nope:]).reshape(T, nh * vd)
    if cfg.mla_out_gate and "no_mla_out_gate" not in cfg.variant:
        o = o * torch.sigmoid(lin(W, p + "g_proj", x))
    return lin(W, p + "o_proj", o)


def moe(W, p, x, cfg, gaps):
    """KimiSparseMoeBlock on the post-norm x [T, H]; appends router top-k gaps to `gaps`."""
    T, E, K = x.shape[0], cfg.E, cfg.K
    s = torch.sigmoid(lin(W, p + "gate", x))
    choice = s + W[p + "gate.e_score_correction_bias"] if p + "gate.e_score_correction_bias" in W else s.clone()
    if cfg.n_group > 1 and cfg.n_group > cfg.topk_group:
        gs = choice.view(T, cfg.n_group, -1).topk(2, dim=-1).values.sum(-1)
        srt = gs.sort(-1, descending=True).values
        gaps.append(mf.rel_gap(srt[:, cfg.topk_group - 1], srt[:, cfg.topk_group]).min().item())
        keep = torch.zeros_like(gs, dtype=torch.bool).scatter_(1, gs.topk(cfg.topk_group, dim=-1).indices, True)
        choice = choice.masked_fill(~keep.repeat_interleave(E // cfg.n_group, 1), -math.inf)
    srt = choice.sort(-1, descending=True)
    if K < E:
        gaps.append(mf.rel_gap(srt.values[:, K - 1], srt.values[:, K]).min().item())
    idx = srt.indices[:, :K]
    w = s.gather(1, idx)
    if K > 1 and cfg.renorm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * cfg.scaling
    z = lin(W, p + "routed_expert_down_proj", x) if cfg.latent else x
    y = torch.zeros_like(z)
    for t in range(T):
        for j in range(K):
            e = f"{p}experts.{int(idx[t, j])}."
            y[t] += w[t, j] * mlp(W, e, z[t : t + 1], cfg, "w1", "w3", "w2")[0]
    if cfg.latent:
        if cfg.latent_norm and "no_routed_expert_norm" not in cfg.variant:
            y = rmsnorm(y, W[p + "routed_expert_norm.weight"], cfg.eps)
        y = lin(W, p + "routed_expert_up_proj", y)
    if cfg.n_shared:
        y = y + mlp(W, p + "shared_experts.", x, cfg)
    return y


def attn_res(P, blocks, norm_w, proj_w, eps):
    """_apply_attn_res: P [T, H], blocks list of [T, H]."""
    v = torch.stack(blocks + [P], 1)  # [T, n+1, H]
    k = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps)
    scores = (k * (norm_w * proj_w.reshape(-1))).sum(-1)
    return torch.einsum("tb,tbh->th", scores.softmax(-1), v)


def forward(W, cfg, tokens, gaps=None):
    """Logits [T, V] (float64) of the whole token list, no cache."""
    gaps = [] if gaps is None else gaps
    h = W["model.embed_tokens.weight"][torch.tensor(tokens)]
    bs = None if "no_attn_res" in cfg.variant else cfg.attn_res
    blocks = []
    for l in range(cfg.L):
        p = f"model.layers.{l}."
        P = h
        x = h
        if bs:
            if blocks:
                x = attn_res(P, blocks, W[p + "self_attention_res_norm.weight"], W[p + "self_attention_res_proj.weight"], cfg.eps)
            if l % bs == 0:
                blocks.append(P)
                P = None
        xn = rmsnorm(x, W[p + "input_layernorm.weight"], cfg.eps)
        a = kda(W, p + "self_attn.", xn, cfg) if l in cfg.kda_layers else mla(W, p + "self_attn.", xn, cfg)
        P = a if P is None else P + a
        x = attn_res(P, blocks, W[p + "mlp_res_norm.weight"], W[p + "mlp_res_proj.weight"], cfg.eps) if bs else P
        xn = rmsnorm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        f = moe(W, p + "block_sparse_moe.", xn, cfg, gaps) if cfg.is_moe(l) else mlp(W, p + "mlp.", xn, cfg)
        h = P + f
    if bs:
        h = attn_res(h, blocks, W["model.output_attn_res_norm.weight"], W["model.output_attn_res_proj.weight"], cfg.eps)
    return lin(W, "lm_head", rmsnorm(h, W["model.norm.weight"], cfg.eps))


def greedy(W, cfg, prompt, new_tokens, gaps):
    toks, margins = list(prompt), []
    for _ in range(new_tokens):
        last = forward(W, cfg, toks, gaps)[-1]
        top = last.topk(2)
        margins.append((top.values[0] - top.values[1]).item())
        toks.append(int(top.indices[0]))
    return toks[len(prompt) :], min(margins)


def rel_err(got, want):
    """max over positions of max|got - want| / max|want| (the fixtures' tolerance measure)."""
    got, want = got.reshape(-1, got.shape[-1]).to(F64), want.reshape(-1, want.shape[-1]).to(F64)
    return ((got - want).abs().amax(-1) / want.abs().amax(-1).clamp_min(1e-300)).max().item()


def load_weights(path, prefix):
    """Every tensor under `prefix` as float64, published names without the prefix;
    MXFP4 experts decoded by transformers' own decoder (mf.decode_mxfp4)."""
    tensors = mf.read_checkpoint(path)
    W = {}
    for name, t in tensors.items():
        if not name.startswith(prefix):
            continue
        n = name[len(prefix) :]
        if n.endswith(".weight_scale"):
            continue
        if n.endswith(".weight_packed"):
            base = n[: -len(".weight_packed")]
            assert t.dtype == torch.uint8, name
            rows, half = t.shape
            enc = {"weight_packed": t, "weight_scale": tensors[prefix + base + ".weight_scale"]}
            W[base + ".weight"] = mf.decode_mxfp4(enc, rows, 2 * half)
        else:
            W[n] = t.to(F64)
    return W


# --------------------------------------------------------------------------------------
# Cross-check against transformers' kimi_linear.
# --------------------------------------------------------------------------------------


@torch.no_grad()
def crosscheck(fx_dir):
    with open(os.path.join(fx_dir, "config.json")) as f:
        cfg = TextConfig(json.load(f))
    with open(os.path.join(fx_dir, "reference.json")) as f:
        ref = json.load(f)
    model = mf.load_reference(fx_dir)
    captured = {}

    def hook(l, mod, args, kwargs, out):
        inp = args[0] if args else kwargs["hidden_states"]
        out = out[0] if isinstance(out, tuple) else out
        captured[l] = (inp.detach().to(F64).clone(), out.detach().to(F64).clone())

    handles = [
        layer.self_attn.register_forward_hook(lambda m, a, k, o, l=l: hook(l, m, a, k, o), with_kwargs=True)
        for l, layer in enumerate(model.model.layers)
    ]
    W = load_weights(fx_dir, "")
    report = {"fixture": os.path.basename(os.path.normpath(fx_dir)), "layers": {}, "logits": []}
    worst = 0.0
    for i, seq in enumerate(ref["sequences"]):
        tokens = seq["tokens"]
        captured.clear()
        tf_logits = mf.forward_logits(model, tokens)
        mine = forward(W, cfg, tokens)
        stored = torch.from_numpy(np.fromfile(os.path.join(fx_dir, seq["logits"]), dtype="<f4").astype(np.float64))
        e_tf, e_stored = rel_err(mine, tf_logits), rel_err(mine, stored.view(len(tokens), -1))
        report["logits"].append({"tokens": len(tokens), "vs_transformers": e_tf, "vs_stored_fixture": e_stored})
        worst = max(worst, e_tf)
        for l, (inp, out) in sorted(captured.items()):
            fn = kda if l in cfg.kda_layers else mla
            e = rel_err(fn(W, f"model.layers.{l}.self_attn.", inp[0], cfg), out[0])
            key = f"{l}:{'kda' if l in cfg.kda_layers else 'mla'}"
            report["layers"][key] = max(report["layers"].get(key, 0.0), e)
            worst = max(worst, e)
    for h in handles:
        h.remove()
    report["max_rel_err"] = worst
    print(f"crosscheck {report['fixture']}: " + json.dumps(report))
    return report


# --------------------------------------------------------------------------------------
# The tiny K3 fixtures.
# --------------------------------------------------------------------------------------

# Kimi K3's published quantization_config (inside text_config).
K3_QUANT = {
    "config_groups": {
        "group_0": {
            "format": "mxfp4-pack-quantized",
            "input_activations": None,
            "output_activations": None,
            "targets": ["Linear"],
            "weights": {
                "actorder": None,
                "block_structure": None,
                "dynamic": False,
                "group_size": 32,
                "num_bits": 4,
                "observer": "minmax",
                "observer_kwargs": {},
                "scale_dtype": "torch.uint8",
                "strategy": "group",
                "symmetric": True,
                "type": "float",
                "zp_dtype": None,
            },
        }
    },
    "format": "mxfp4-pack-quantized",
    "global_compression_ratio": None,
    "ignore": [
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*",
        "re:.*vision_tower.*",
        "re:.*mm_projector.*",
    ],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}


def k3_config(**text_over):
    text = {
        "activation_situ_beta": 4.0,
        "activation_situ_linear_beta": 25.0,
        "architectures": ["KimiLinearForCausalLM"],
        "attn_res_block_size": 2,
        "bos_token_id": mf.BOS,
        "eos_token_id": mf.EOS,
        "first_k_dense_replace": 1,
        "hidden_act": "situ",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "kv_lora_rank": 32,
        "latent_moe_use_norm": True,
        "linear_attn_config": {
            "full_attn_layers": [3, 5],
            "gate_lower_bound": -5.0,
            "head_dim": 16,
            "kda_layers": [1, 2, 4],
            "num_heads": 4,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
        },
        "max_position_embeddings": 4096,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "model_type": "kimi_linear",
        "moe_intermediate_size": 32,
        "moe_layer_freq": 1,
        "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid",
        "num_attention_heads": 4,
        "num_expert_group": 1,
        "num_experts": 12,
        "num_experts_per_token": 4,
        "num_hidden_layers": 5,
        "num_key_value_heads": 4,
        "num_nextn_predict_layers": 0,
        "num_shared_experts": 2,
        "pad_token_id": mf.VOCAB - 1,
        "q_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "quantization_config": K3_QUANT,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "routed_expert_hidden_size": 32,
        "routed_scaling_factor": 1.0,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "use_cache": True,
        "use_grouped_topk": True,
        "v_head_dim": 16,
        "vocab_size": mf.VOCAB,
    }
    text.update(text_over)
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "auto_map": {
            "AutoConfig": "configuration_kimi_k3.KimiK3Config",
            "AutoModel": "modeling_kimi_k3.KimiK3ForConditionalGeneration",
            "AutoModelForCausalLM": "modeling_kimi_k3.KimiK3ForConditionalGeneration",
        },
        "bos_token_id": mf.BOS,
        "dtype": "bfloat16",
        "eos_token_id": mf.EOS,
        "ignore_index": -100,
        "media_placeholder_token_id": mf.VOCAB - 2,
        "model_type": "kimi_k3",
        "pad_token_id": mf.VOCAB - 1,
        "text_config": text,
        "tie_word_embeddings": False,
        "vision_config": {
            "activation_func": "gelu_pytorch_tanh",
            "merge_kernel_size": [2, 2],
            "mm_hidden_size": 16,
            "mm_projector_type": "patchmergerv2",
            "patch_size": 14,
            "text_hidden_size": text["hidden_size"],
            "vt_hidden_size": 16,
            "vt_intermediate_size": 32,
            "vt_num_attention_heads": 2,
            "vt_num_hidden_layers": 1,
        },
    }


# Vision tensors as K3 names them (second shard); deltafin must ignore them.
VISION = {
    "mm_projector.post_norm.weight": (64,),
    "mm_projector.proj.0.weight": (64, 64),
    "vision_tower.encoder.blocks.0.wqkv.weight": (48, 16),
    "vision_tower.encoder.blocks.0.wo.weight": (16, 16),
    "vision_tower.encoder.final_layernorm.weight": (16,),
    "vision_tower.patch_embed.proj.weight": (8, 3, 14, 14),
}

F32_NAMES = ("A_log", "dt_bias", "conv1d.weight", "o_norm.weight", "e_score_correction_bias")
LATENT_RMS = 1.5e-3  # q_a / kv_a latents: mean square ~2e-6, so the 1e-6 norm eps is visible


def text_tensors(cfg):
    """Published text tensors: name -> (shape, init kind)."""
    H, V = cfg.H, cfg.V
    t = {
        "model.embed_tokens.weight": ((V, H), "embed"),
        "lm_head.weight": ((V, H), "lm_head"),
        "model.norm.weight": ((H,), "norm"),
    }
    if cfg.attn_res:
        t["model.output_attn_res_norm.weight"] = ((H,), "norm")
        t["model.output_attn_res_proj.weight"] = ((1, H), "linear")
    nh, dk, D = cfg.kda_heads, cfg.kda_dim, cfg.kda_heads * cfg.kda_dim
    for l in range(cfg.L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = ((H,), "norm")
        t[p + "post_attention_layernorm.weight"] = ((H,), "norm")
        if cfg.attn_res:
            for s in ("self_attention_res", "mlp_res"):
                t[p + s + "_norm.weight"] = ((H,), "norm")
                t[p + s + "_proj.weight"] = ((1, H), "linear")
        a = p + "self_attn."
        if l in cfg.kda_layers:
            for n in ("q", "k", "v"):
                t[a + n + "_proj.weight"] = ((D, H), "linear")
                t[a + n + "_conv1d.weight"] = ((D, 1, cfg.conv_k), "conv")
            t[a + "f_a_proj.weight"] = ((dk, H), "linear")
            t[a + "f_b_proj.weight"] = ((D, dk), "linear")
            t[a + "A_log"] = ((dk,), "a_log")  # [head_dim] as published; entries >= heads are zero
            t[a + "dt_bias"] = ((D,), "dt_bias")
            t[a + "b_proj.weight"] = ((nh, H), "linear")
            t[a + "g_proj.weight"] = ((D, H), "linear")
            t[a + "o_norm.weight"] = ((dk,), "norm")
            t[a + "o_proj.weight"] = ((H, D), "linear")
        else:
            mh, qd = cfg.mla_heads, cfg.nope + cfg.rope
            t[a + "q_a_proj.weight"] = ((cfg.q_lora, H), "small_latent")
            t[a + "q_a_layernorm.weight"] = ((cfg.q_lora,), "norm")
            t[a + "q_b_proj.weight"] = ((mh * qd, cfg.q_lora), "linear")
            t[a + "kv_a_proj_with_mqa.weight"] = ((cfg.kv_lora + cfg.rope, H), "kv_a")
            t[a + "kv_a_layernorm.weight"] = ((cfg.kv_lora,), "norm")
            t[a + "kv_b_proj.weight"] = ((mh * (cfg.nope + cfg.vdim), cfg.kv_lora), "linear")
            t[a + "g_proj.weight"] = ((mh * cfg.vdim, H), "linear")
            t[a + "o_proj.weight"] = ((H, mh * cfg.vdim), "linear")
        if cfg.is_moe(l):
            m = p + "block_sparse_moe."
            lat, I, S = cfg.latent, cfg.moe_inter, cfg.moe_inter * cfg.n_shared
            t[m + "gate.weight"] = ((cfg.E, H), "router")
            t[m + "gate.e_score_correction_bias"] = ((cfg.E,), "bias")
            t[m + "routed_expert_down_proj.weight"] = ((lat, H), "linear")
            t[m + "routed_expert_norm.weight"] = ((lat,), "norm")
            t[m + "routed_expert_up_proj.weight"] = ((H, lat), "linear")
            t[m + "shared_experts.gate_proj.weight"] = ((S, H), "gate")
            t[m + "shared_experts.up_proj.weight"] = ((S, H), "linear")
            t[m + "shared_experts.down_proj.weight"] = ((H, S), "linear")
            for e in range(cfg.E):
                t[f"{m}experts.{e}.w1.weight"] = ((I, lat), "gate")
                t[f"{m}experts.{e}.w3.weight"] = ((I, lat), "linear")
                t[f"{m}experts.{e}.w2.weight"] = ((lat, I), "linear")
        else:
            t[p + "mlp.gate_proj.weight"] = ((cfg.dense_inter, H), "gate")
            t[p + "mlp.up_proj.weight"] = ((cfg.dense_inter, H), "linear")
            t[p + "mlp.down_proj.weight"] = ((H, cfg.dense_inter), "linear")
    return t


def random_tensor(shape, kind, cfg, gen):
    def randn(s):
        return torch.randn(s, generator=gen, dtype=F64)

    if kind == "embed":
        return randn(shape)
    if kind == "lm_head":
        return randn(shape) * (2.5 / math.sqrt(cfg.H))
    if kind == "norm":
        return 1.0 + 0.2 * randn(shape)
    if kind == "router":
        return randn(shape) * (2.0 / math.sqrt(shape[-1]))
    if kind == "bias":
        return randn(shape) * 0.1
    if kind == "conv":
        return randn(shape) * 0.5
    if kind == "dt_bias":  # decays exp(-5 sigmoid(A (g + dt))) spread over ~0.05 .. 0.95
        return -2.0 + 0.5 * randn(shape)
    if kind == "a_log":
        v = torch.zeros(shape, dtype=F64)
        v[: cfg.kda_heads] = torch.empty(cfg.kda_heads, dtype=F64).uniform_(0.5, 4.0, generator=gen).log()
        return v
    if kind == "gate":  # GLU gate projections: pre-activations ~N(0, 4), where SiTU's tanh bends
        return randn(shape) * (2.0 / math.sqrt(shape[-1]))
    if kind == "small_latent":
        return randn(shape) * (LATENT_RMS / math.sqrt(shape[-1]))
    if kind == "kv_a":
        v = randn(shape) / math.sqrt(shape[-1])
        v[: cfg.kv_lora] *= LATENT_RMS
        return v
    assert kind == "linear", kind
    return randn(shape) / math.sqrt(shape[-1])


def stored_dtype(name):
    return torch.float32 if name.endswith(F32_NAMES) else torch.bfloat16


VARIANTS = [
    "silu_for_situ",
    "mla_norm_eps_1e-5",
    "a_log_per_channel",
    "softplus_gate",
    "no_attn_res",
    "no_routed_expert_norm",
    "no_mla_out_gate",
]


@torch.no_grad()
def attempt(fx, seed, out_dir):
    cfg_dict = copy.deepcopy(fx["config"])
    cfg = TextConfig(cfg_dict["text_config"])
    gen = torch.Generator().manual_seed(seed)
    names = text_tensors(cfg)
    file_tensors, quantized, expected = {}, {}, {}
    for name in sorted(names, key=mf.natural_key):
        shape, kind = names[name]
        v = random_tensor(shape, kind, cfg, gen)
        if ".experts." in name:
            enc, deq = mf.quantize_mxfp4(v)
            base = PREFIX + name[: -len(".weight")]
            for suffix, t in enc.items():
                file_tensors[f"{base}.{suffix}"] = t
            quantized[name] = base
            expected[name] = deq
        else:
            t = v.to(stored_dtype(name))
            file_tensors[PREFIX + name] = t
            expected[name] = t.to(F64)
    for name, shape in VISION.items():
        file_tensors[name] = (0.02 * torch.randn(shape, generator=gen, dtype=F64)).to(torch.bfloat16)

    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": mf.BOS, "eos_token_id": mf.EOS, "do_sample": False}, f, indent=2)
    # Two shards as published: the language model, then vision tower and projector.
    shards = [sorted((n for n in file_tensors if n.startswith(PREFIX)), key=mf.natural_key), sorted(VISION)]
    weight_map, total = {}, 0
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({n: file_tensors[n].contiguous() for n in part}, os.path.join(out_dir, fname), {"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += file_tensors[n].numel() * file_tensors[n].element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    # Verify what was written: every text tensor read back (experts decoded by
    # transformers' MXFP4 decoder) equals what was generated, with the published dtypes.
    written = mf.read_checkpoint(out_dir)
    if set(written) != set(file_tensors):
        raise SystemExit(f"{fx['name']}: written tensor names differ")
    W = load_weights(out_dir, PREFIX)
    if set(W) != set(expected):
        raise SystemExit(f"{fx['name']}: text tensors differ: {set(W) ^ set(expected)}")
    for name, v in expected.items():
        if name not in quantized and written[PREFIX + name].dtype != stored_dtype(name):
            raise SystemExit(f"{fx['name']}: {name} stored as {written[PREFIX + name].dtype}")
        if not torch.equal(W[name], v):
            raise SystemExit(f"{fx['name']}: {name} read back differs by {(W[name] - v).abs().max().item()}")

    rng = np.random.default_rng(seed)
    gaps, seqs, paths = [], [], []
    for n in (16, 23):
        tokens = [mf.BOS] + rng.integers(2, mf.VOCAB - 1, size=n - 1).tolist()
        seqs.append((tokens, forward(W, cfg, tokens, gaps)))
    for n in (5, 11):
        prompt = [mf.BOS] + rng.integers(2, mf.VOCAB - 1, size=n - 1).tolist()
        generated, margin = greedy(W, cfg, prompt, 8, gaps)
        paths.append({"prompt": prompt, "generated": generated, "min_margin": round(margin, 6)})
    min_gap, min_margin = min(gaps), min(p["min_margin"] for p in paths)
    ok = min_gap > mf.ROUTE_TIE_REL and min_margin > mf.GREEDY_MIN_MARGIN
    print(f"  {fx['name']} seed {seed}: min route gap {min_gap:.3g}, min greedy margin {min_margin:.3g}"
          f" -> {'ok' if ok else 'retry'}")
    if not ok:
        return False

    # What the fixture detects: each deliberate deviation's relative logit change.
    tokens, want = seqs[1]
    detects = {}
    for var in VARIANTS:
        vcfg = copy.copy(cfg)
        vcfg.variant = {var}
        detects[var] = float(f"{rel_err(forward(W, vcfg, tokens), want):.4g}")
    print(f"  {fx['name']}: relative logit change per deviation: {json.dumps(detects)}")

    sequences = []
    for i, (tokens, logits) in enumerate(seqs):
        fname = f"logits_{i}.bin"
        logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out_dir, fname))
        sequences.append({"tokens": tokens, "logits": fname})
    reference = {
        "arch": fx["arch"],
        "encoding": fx["encoding"],
        "generator": "tools/k3_reference.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": seed,
        "sequences": sequences,
        "greedy": paths,
        "min_route_gap": float(f"{min_gap:.6g}"),
        "tolerance": mf.TOLERANCE,
        "deviation_rel_change": detects,
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, indent=2)
    return True


FIXTURES = [
    # AttnRes with blocks at layers 0, 2, 4 (+ output), KDA at 0, 1, 3, gated MLA
    # (q_lora) at 2, 4, dense SiTU layer 0, latent MoE (64 -> 32) with 12 MXFP4
    # experts, top-4, 2 shared experts; two shards (text, then vision).
    dict(name="kimi_k3_mxfp4", arch="kimi_k3", encoding="mxfp4", config=k3_config(), seed=6000),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures", help="folder that receives one folder per fixture")
    ap.add_argument("--only", nargs="*", help="names of fixtures to make (default: all)")
    ap.add_argument("--crosscheck", nargs="*", default=[], help="kimi_linear fixture folders to compare with transformers")
    ap.add_argument("--report", help="write the cross-check results (JSON) here")
    args = ap.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    reports, bad = [], False
    for d in args.crosscheck:
        r = crosscheck(d)
        reports.append(r)
        bad |= not (r["max_rel_err"] < 1e-4)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(reports, f, indent=2)
    failed = []
    for fx in FIXTURES:
        if args.only and fx["name"] not in args.only:
            continue
        out_dir = os.path.join(args.out, fx["name"])
        for seed in range(fx["seed"], fx["seed"] + mf.MAX_SEED_TRIES):
            if attempt(fx, seed, out_dir):
                break
        else:
            failed.append(fx["name"])
            shutil.rmtree(out_dir, ignore_errors=True)
        if os.path.isdir(out_dir):
            size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
            print(f"{fx['name']}: {size / 1024:.0f} KiB")
    if failed:
        raise SystemExit(f"no seed passed the tie checks for: {failed}")
    if bad:
        raise SystemExit("cross-check against transformers failed (max relative error >= 1e-4)")


if __name__ == "__main__":
    main()
