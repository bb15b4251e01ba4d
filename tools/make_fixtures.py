#!/usr/bin/env python3
"""Writes the reference fixtures under tests/fixtures/ (format: docs/fixtures.md).

Each fixture is a tiny random checkpoint in the model maker's *published*
Hugging Face layout (per-expert tensors, published names and dtypes, published
quantized encodings) plus float64 reference logits computed by Hugging Face
transformers from exactly those weights.

How one fixture is made:
  1. config.json as published -> transformers config -> model (float64, eager
     attention, eager experts).
  2. Every parameter and persistent buffer gets random values, rounded to the
     dtype the published checkpoint stores it in (bf16, or f32 for a few).
  3. The in-memory (transformers 5.x, fused-experts) state is mapped to the
     published tensor names. Tensors the published checkpoint quantizes are
     quantized (fp8 block / int4 group / mxfp4) and the model's parameters are
     replaced by their exact float64 dequantization.
  4. The checkpoint is written. Verification: it is loaded back with
     AutoModelForCausalLM.from_pretrained (quantized fixtures: a float64 copy
     of the dequantized tensors under the published names, plus an independent
     decode of the written quantized tensors) and every parameter must equal
     the model computed with; the loader must report no missing, unexpected or
     mismatched keys.
  5. Reference: logits of whole sequences and greedy continuations from the
     loaded float64 model. Seeds are retried until no router top-k choice is a
     near-tie and every greedy step has a clear top-1 margin.

Needs torch + transformers 5.x (+ safetensors, numpy). Run from the repo root:
    PYTHONUNBUFFERED=1 python3 tools/make_fixtures.py --out tests/fixtures
"""

import argparse
import copy
import json
import math
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM

VOCAB = 320
BOS, EOS = 0, 1
ROUTE_TIE_REL = 1e-4  # minimum relative gap between the k-th and (k+1)-th router choice
GREEDY_MIN_MARGIN = 1e-3  # minimum top1 - top2 logit gap along greedy paths
MAX_SEED_TRIES = 40
TOLERANCE = 1e-3

torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))

# --------------------------------------------------------------------------------------
# Configs, written as the model makers publish them.
# --------------------------------------------------------------------------------------


def deepseek_v3_config(**over):
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "n_shared_experts": 1,
        "n_routed_experts": 16,
        "num_experts_per_tok": 4,
        "n_group": 4,
        "topk_group": 2,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "q_lora_rank": 48,
        "kv_lora_rank": 32,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 16,
        "v_head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "rope_interleave": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "initializer_range": 0.02,
        "num_nextn_predict_layers": 0,
        "use_cache": True,
        "torch_dtype": "bfloat16",
    }
    cfg.update(over)
    return cfg


def qwen3_moe_config(**over):
    cfg = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "bfloat16",
    }
    cfg.update(over)
    return cfg


def mixtral_config(**over):
    cfg = {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.02,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "bfloat16",
    }
    cfg.update(over)
    return cfg


def kimi_linear_config(**over):
    # Keys as moonshotai/Kimi-Linear-48B-A3B-Instruct publishes them (num_experts,
    # num_experts_per_token, moe_renormalize, linear_attn_config with 1-based layer lists).
    cfg = {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "kv_lora_rank": 32,
        "q_lora_rank": None,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 16,
        "v_head_dim": 16,
        "mla_use_nope": True,
        "linear_attn_config": {
            "full_attn_layers": [2],
            "kda_layers": [1, 3],
            "head_dim": 16,
            "num_heads": 4,
            "short_conv_kernel_size": 4,
        },
        "num_experts": 12,
        "num_experts_per_token": 4,
        "num_shared_experts": 1,
        "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid",
        "num_expert_group": 1,
        "topk_group": 1,
        "use_grouped_topk": True,
        "routed_scaling_factor": 2.446,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "hidden_act": "silu",
        "model_max_length": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": VOCAB - 1,
        "num_nextn_predict_layers": 0,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "bfloat16",
    }
    cfg.update(over)
    return cfg


# DeepSeek-V3 / Kimi K2 Instruct (block fp8).
FP8_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}

# Kimi K2 Thinking (compressed-tensors int4, routed experts only).
INT4_QUANT = {
    "config_groups": {
        "group_0": {
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
                "strategy": "group",
                "symmetric": True,
                "type": "int",
            },
        }
    },
    "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": None,
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}

# Kimi K3 routed experts (compressed-tensors mxfp4, E8M0 scales as uint8).
MXFP4_QUANT = {
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 4,
                "type": "float",
                "strategy": "group",
                "group_size": 32,
                "symmetric": True,
                "dynamic": False,
                "scale_dtype": "torch.uint8",
            },
        }
    },
    "format": "mxfp4-pack-quantized",
    "ignore": [
        "re:.*self_attn.*",
        "re:.*shared_experts.*",
        "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*",
    ],
    "quant_method": "compressed-tensors",
    "quantization_status": "compressed",
}


FIXTURES = [
    # name, engine arch, experts' encoding, config, first seed, options
    dict(
        name="deepseek_v3_bf16",
        arch="deepseek_v3",
        encoding="bf16",
        # DeepSeek-V3's published shape of config: q_lora, yarn (mscale == mscale_all_dim), 4 groups of 3 experts.
        config=deepseek_v3_config(n_routed_experts=12),
        seed=1000,
    ),
    dict(
        name="deepseek_v3_noqlora_bf16",
        arch="deepseek_v3",
        encoding="bf16",
        # q_proj instead of q_a/q_b; YaRN with mscale != mscale_all_dim (cos/sin scaled too).
        config=deepseek_v3_config(
            q_lora_rank=None,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.827,
            rope_scaling={
                "type": "yarn",
                "factor": 8.0,
                "original_max_position_embeddings": 32,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 0.8,
            },
        ),
        seed=2000,
    ),
    dict(
        name="deepseek_v3_fp8",
        arch="deepseek_v3",
        encoding="fp8",
        # q_lora 160, q_b out 192, dense intermediate 192, expert intermediate 160: partial 128-blocks.
        config=deepseek_v3_config(
            q_lora_rank=160,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            intermediate_size=192,
            moe_intermediate_size=160,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            num_hidden_layers=2,
            quantization_config=FP8_QUANT,
        ),
        seed=3000,
        quant="fp8",
    ),
    dict(
        name="deepseek_v3_int4",
        arch="deepseek_v3",
        encoding="int4",
        # Kimi K2 Thinking's shape of config: one expert group, yarn, int4 routed experts.
        config=deepseek_v3_config(
            moe_intermediate_size=64,
            n_group=1,
            topk_group=1,
            routed_scaling_factor=2.827,
            rope_scaling={
                "type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 64,
                "beta_fast": 1.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
            quantization_config=INT4_QUANT,
        ),
        seed=4000,
        quant="int4",
    ),
    dict(name="qwen3_moe_bf16", arch="qwen3_moe", encoding="bf16", config=qwen3_moe_config(num_hidden_layers=2), seed=5000),
    dict(
        name="qwen3_moe_sparse_step_bf16",
        arch="qwen3_moe",
        encoding="bf16",
        # decoder_sparse_step 2 -> MoE at layers 1, 3, 5; mlp_only_layers [3] -> MoE at 1, 5.
        config=qwen3_moe_config(
            num_hidden_layers=6,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
            num_experts=8,
            num_experts_per_tok=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
        ),
        seed=6000,
    ),
    dict(name="mixtral_bf16", arch="mixtral", encoding="bf16", config=mixtral_config(), seed=7000, shards=2),
    dict(name="kimi_linear_bf16", arch="kimi_linear", encoding="bf16", config=kimi_linear_config(), seed=8000),
    dict(
        name="kimi_linear_mxfp4",
        arch="kimi_linear",
        encoding="mxfp4",
        config=kimi_linear_config(moe_intermediate_size=64, quantization_config=MXFP4_QUANT),
        seed=9000,
        quant="mxfp4",
    ),
]

# --------------------------------------------------------------------------------------
# In-memory (transformers 5.x) <-> published tensor names.
# --------------------------------------------------------------------------------------

EXPERT_NAMES = {
    # arch: (module name of the MoE block in the published checkpoint, gate, up, down)
    "deepseek_v3": ("mlp", "gate_proj", "up_proj", "down_proj"),
    "qwen3_moe": ("mlp", "gate_proj", "up_proj", "down_proj"),
    "mixtral": ("block_sparse_moe", "w1", "w3", "w2"),
    "kimi_linear": ("block_sparse_moe", "w1", "w3", "w2"),
}


class Slot:
    """Where a published tensor lives in the in-memory state: state[key][index][rows]."""

    def __init__(self, key, index=None, rows=None):
        self.key, self.index, self.rows = key, index, rows

    def get(self, state):
        t = state[self.key]
        if self.index is not None:
            t = t[self.index]
        if self.rows is not None:
            t = t[self.rows[0] : self.rows[1]]
        return t

    def set(self, state, value):
        self.get(state).copy_(value)


def published_layout(arch, state):
    """Maps each published tensor name to its Slot in the in-memory state dict."""
    moe, gate, up, down = EXPERT_NAMES[arch]
    layout = {}
    moe_layers = {m.group(1) for k in state for m in [re.match(r"(model\.layers\.\d+)\.mlp\.experts\.", k)] if m}
    for key, t in state.items():
        m = re.match(r"(model\.layers\.\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$", key)
        if m:
            prefix = f"{m.group(1)}.{moe}.experts"
            for e in range(t.shape[0]):
                if m.group(2) == "gate_up_proj":
                    inter = t.shape[1] // 2
                    layout[f"{prefix}.{e}.{gate}.weight"] = Slot(key, e, (0, inter))
                    layout[f"{prefix}.{e}.{up}.weight"] = Slot(key, e, (inter, 2 * inter))
                else:
                    layout[f"{prefix}.{e}.{down}.weight"] = Slot(key, e)
            continue
        name = key
        lm = re.match(r"(model\.layers\.\d+)\.mlp\.(.*)$", key)
        if lm and lm.group(1) in moe_layers and moe != "mlp":
            name = f"{lm.group(1)}.{moe}.{lm.group(2)}"
        if arch == "kimi_linear":
            name = name.replace(".self_attn.forget_gate.", ".self_attn.")
            cm = re.match(r"(.*\.self_attn)\.conv1d\.weight$", name)
            if cm:
                c = t.shape[0] // 3
                for i, p in enumerate("qkv"):
                    layout[f"{cm.group(1)}.{p}_conv1d.weight"] = Slot(key, None, (i * c, (i + 1) * c))
                continue
        layout[name] = Slot(key)
    return layout


def stored_dtype(arch, name):
    """The dtype the published checkpoint stores a (non-quantized) tensor in."""
    if name.endswith("e_score_correction_bias"):
        return torch.float32
    if arch == "kimi_linear" and re.search(r"\.(A_log|dt_bias|[qkv]_conv1d\.weight)$", name):
        return torch.float32
    return torch.bfloat16


def is_quantized(quant, name, t):
    """Whether the published checkpoint of this encoding quantizes the tensor `name`."""
    if quant is None or t.dim() != 2 or not name.endswith(".weight"):
        return False
    if quant == "fp8":  # DeepSeek-V3: every Linear except lm_head, embeddings and the router
        return not (
            name == "lm_head.weight" or "embed_tokens" in name or name.endswith(".gate.weight") or "norm" in name
        )
    return ".experts." in name  # int4 / mxfp4: routed experts only


# --------------------------------------------------------------------------------------
# Random weights.
# --------------------------------------------------------------------------------------


def fill_random(model, gen):
    """Random values for every parameter and persistent buffer, scaled so that
    activations stay O(1), logits are spread and routing is decisive."""
    state = model.state_dict()
    hidden = model.config.hidden_size

    def randn(shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    for key, t in state.items():
        if "embed_tokens" in key:
            v = randn(t.shape)
        elif key == "lm_head.weight":
            v = randn(t.shape) * (2.5 / math.sqrt(hidden))
        elif key.endswith("e_score_correction_bias"):
            v = randn(t.shape) * 0.1
        elif re.search(r"\.mlp\.gate\.weight$", key):  # router
            v = randn(t.shape) * (2.0 / math.sqrt(hidden))
        elif key.endswith("A_log"):
            v = torch.empty(t.shape, dtype=torch.float64).uniform_(0.5, 4.0, generator=gen).log()
        elif key.endswith("dt_bias"):
            v = randn(t.shape) * 0.5
        elif key.endswith("conv1d.weight"):
            v = randn(t.shape) * 0.5
        elif t.dim() == 1:  # norms
            v = 1.0 + 0.2 * randn(t.shape)
        else:  # Linear weights [.., out, in]
            v = randn(t.shape) / math.sqrt(t.shape[-1])
        state[key].copy_(v)
    return state


def round_to_stored(arch, model):
    """Rounds every tensor to the dtype it is published in (via the published names)."""
    state = model.state_dict()
    layout = published_layout(arch, state)
    for name, slot in layout.items():
        v = slot.get(state)
        slot.set(state, v.to(stored_dtype(arch, name)).to(torch.float64))


# --------------------------------------------------------------------------------------
# Encodings: quantize (writer) and independent decoders (verification).
# --------------------------------------------------------------------------------------

E4M3_MAX = 448.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)


def expand_blocks(s, rows, cols, br, bc):
    return s.repeat_interleave(br, 0).repeat_interleave(bc, 1)[:rows, :cols]


def quantize_fp8(w):
    """DeepSeek-V3 block fp8: weight F8_E4M3 [out,in], weight_scale_inv F32 [ceil(out/128), ceil(in/128)]."""
    rows, cols = w.shape
    br, bc = -(-rows // 128), -(-cols // 128)
    scale = torch.zeros(br, bc, dtype=torch.float32)
    for i in range(br):
        for j in range(bc):
            amax = w[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128].abs().max().item()
            scale[i, j] = max(amax, 1e-12) / E4M3_MAX
    s = expand_blocks(scale.double(), rows, cols, 128, 128)
    q = (w / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float32).to(torch.float8_e4m3fn)
    deq = q.to(torch.float64) * s
    return {"weight": q, "weight_scale_inv": scale}, deq


def decode_e4m3_bits(q):
    """e4m3 (bias 7, no inf) decoded from its bits, independently of torch's float8 cast."""
    b = q.view(torch.uint8).to(torch.int64)
    sign = torch.where((b >> 7) == 1, -1.0, 1.0).double()
    e = (b >> 3) & 0xF
    m = (b & 0x7).double()
    normal = (1.0 + m / 8.0) * torch.pow(2.0, (e - 7).double())
    sub = (m / 8.0) * 2.0**-6
    assert not bool(((e == 15) & ((b & 7) == 7)).any()), "NaN code in fp8 weight"
    return sign * torch.where(e == 0, sub, normal)


def decode_fp8(tensors, rows, cols):
    q, s = tensors["weight"], tensors["weight_scale_inv"]
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
    assert tuple(s.shape) == (-(-rows // 128), -(-cols // 128)), s.shape
    v = decode_e4m3_bits(q)
    assert torch.equal(v, q.to(torch.float64)), "e4m3 bit decode disagrees with torch"
    return v * expand_blocks(s.double(), rows, cols, 128, 128)


def quantize_int4(w):
    """compressed-tensors pack-quantized int4, symmetric, group 32 along the input dim."""
    rows, cols = w.shape
    assert cols % 32 == 0
    g = w.view(rows, cols // 32, 32)
    scale = (g.abs().amax(-1) / 7.0).clamp_min(1e-8).to(torch.bfloat16)
    s = scale.double()
    q = torch.round(g / s[..., None]).clamp(-8, 7).to(torch.int64)
    deq = (q.double() * s[..., None]).view(rows, cols)
    u = (q.view(rows, cols) + 8).view(rows, cols // 8, 8)
    packed = (u << (4 * torch.arange(8, dtype=torch.int64))).sum(-1)  # 0 .. 2^32-1
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    shape = torch.tensor([rows, cols], dtype=torch.int32)
    return {"weight_packed": packed, "weight_scale": scale, "weight_shape": shape}, deq


def decode_int4(tensors, rows, cols):
    p, s, shape = tensors["weight_packed"], tensors["weight_scale"], tensors["weight_shape"]
    assert p.dtype == torch.int32 and tuple(p.shape) == (rows, cols // 8)
    assert s.dtype == torch.bfloat16 and tuple(s.shape) == (rows, cols // 32)
    assert shape.dtype == torch.int32 and shape.tolist() == [rows, cols]
    words = p.to(torch.int64) & 0xFFFFFFFF
    out = torch.empty(rows, cols, dtype=torch.float64)
    for j in range(8):  # element 8c+j sits in bits 4j..4j+3 of word c, stored as q+8
        out[:, j::8] = (((words >> (4 * j)) & 0xF) - 8).double()
    return out * s.double().repeat_interleave(32, 1)


def quantize_mxfp4(w):
    """Kimi K3 mxfp4: weight_packed U8 [out, in/2] (low nibble first), weight_scale U8 E8M0 [out, in/32]."""
    rows, cols = w.shape
    assert cols % 32 == 0
    g = w.view(rows, cols // 32, 32)
    amax = g.abs().amax(-1).clamp_min(1e-30)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    x = g / torch.pow(2.0, e)[..., None]
    idx = (x.abs()[..., None] - E2M1).abs().argmin(-1)
    sign = ((x < 0) & (idx > 0)).to(torch.int64)
    code = (sign << 3) | idx
    deq = (torch.where(sign == 1, -1.0, 1.0).double() * E2M1[idx] * torch.pow(2.0, e)[..., None]).view(rows, cols)
    code = code.view(rows, cols)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).to(torch.uint8)
    scale = (e + 127).to(torch.uint8)
    return {"weight_packed": packed, "weight_scale": scale}, deq


def decode_mxfp4(tensors, rows, cols):
    """Decoded with transformers' own MXFP4 (GPT-OSS) decoder as the oracle."""
    from transformers.integrations.mxfp4 import _convert_moe_packed_tensors

    p, s = tensors["weight_packed"], tensors["weight_scale"]
    assert p.dtype == torch.uint8 and tuple(p.shape) == (rows, cols // 2)
    assert s.dtype == torch.uint8 and tuple(s.shape) == (rows, cols // 32)
    blocks = p.view(1, rows, cols // 32, 16)
    out = _convert_moe_packed_tensors(blocks, s.view(1, rows, cols // 32), dtype=torch.float64)
    return out[0].transpose(0, 1).contiguous()  # [1, in, out] -> [out, in]


QUANTIZERS = {"fp8": quantize_fp8, "int4": quantize_int4, "mxfp4": quantize_mxfp4}
DECODERS = {"fp8": decode_fp8, "int4": decode_int4, "mxfp4": decode_mxfp4}

# --------------------------------------------------------------------------------------
# Router near-tie checks and reference computation.
# --------------------------------------------------------------------------------------


def rel_gap(a, b):
    return (a - b) / torch.clamp(a.abs(), min=1.0)


class RouteWatch:
    """Forward hooks on every router: records the smallest relative gap between
    the last chosen and the first rejected candidate (groups and experts)."""

    def __init__(self, model):
        self.min_gap = math.inf
        self.handles = []
        for mod in model.modules():
            if hasattr(mod, "top_k") and hasattr(mod, "weight") and "Router" in type(mod).__name__:
                self.handles.append(mod.register_forward_hook(self.hook))
        assert self.handles, "no router found"

    def hook(self, mod, args, out):
        logits = out[0].detach().to(torch.float64).reshape(-1, mod.weight.shape[0])
        k = mod.top_k
        gaps = []
        if hasattr(mod, "e_score_correction_bias"):  # sigmoid + bias, group-limited (noaux_tc)
            s = logits.sigmoid() + mod.e_score_correction_bias.to(torch.float64)
            n, e = s.shape
            g = mod.num_group
            gs = s.view(n, g, e // g).topk(2, dim=-1).values.sum(-1)
            if mod.topk_group < g:
                srt = gs.sort(-1, descending=True).values
                gaps.append(rel_gap(srt[:, mod.topk_group - 1], srt[:, mod.topk_group]))
            keep = torch.zeros_like(gs, dtype=torch.bool)
            keep.scatter_(1, gs.topk(mod.topk_group, dim=-1).indices, True)
            keep = keep.repeat_interleave(e // g, dim=1)
            s = s.masked_fill(~keep, -math.inf)
            srt = s.sort(-1, descending=True).values
            if k < int(keep[0].sum()):
                gaps.append(rel_gap(srt[:, k - 1], srt[:, k]))
        else:  # softmax routers: top-k of the logits
            srt = logits.sort(-1, descending=True).values
            gaps.append(rel_gap(srt[:, k - 1], srt[:, k]))
        for gp in gaps:
            self.min_gap = min(self.min_gap, gp.min().item())

    def close(self):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def forward_logits(model, tokens):
    ids = torch.tensor([tokens], dtype=torch.long)
    out = model(input_ids=ids, use_cache=False)
    return out.logits[0].to(torch.float64)


@torch.no_grad()
def greedy(model, prompt, new_tokens):
    """Greedy continuation; every step recomputes the whole prefix (no cache)."""
    toks = list(prompt)
    margins = []
    for _ in range(new_tokens):
        last = forward_logits(model, toks)[-1]
        top = last.topk(2)
        margins.append((top.values[0] - top.values[1]).item())
        toks.append(int(top.indices[0]))
    return toks[len(prompt) :], min(margins)


# --------------------------------------------------------------------------------------
# Writing.
# --------------------------------------------------------------------------------------


def model_config(cfg_dict, tmp):
    """transformers config from the published config.json (without quantization_config)."""
    d = {k: v for k, v in cfg_dict.items() if k != "quantization_config"}
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(d, f, indent=2)
    return AutoConfig.from_pretrained(tmp)


def write_checkpoint(out_dir, tensors, shards):
    names = sorted(tensors, key=natural_key)
    if shards == 1:
        save_file({n: tensors[n].contiguous() for n in names}, os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
        return
    per = -(-len(names) // shards)
    weight_map, total = {}, 0
    for i in range(shards):
        part = names[i * per : (i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n].contiguous() for n in part}, os.path.join(out_dir, fname), {"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += tensors[n].numel() * tensors[n].element_size()
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def read_checkpoint(out_dir):
    idx = os.path.join(out_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(load_file(os.path.join(out_dir, fn)))
    return tensors


def natural_key(s):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def load_reference(path):
    model, info = AutoModelForCausalLM.from_pretrained(
        path,
        dtype=torch.float64,
        attn_implementation="eager",
        experts_implementation="eager",
        output_loading_info=True,
    )
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs", "conversion_errors")}
    if bad:
        raise SystemExit(f"loading {path}: {bad}")
    model.eval()
    return model


def assert_same_params(ref_state, model, what):
    state = model.state_dict()
    if set(state) != set(ref_state):
        raise SystemExit(f"{what}: state keys differ: {set(state) ^ set(ref_state)}")
    for k, v in ref_state.items():
        w = state[k]
        if w.dtype != torch.float64 or not torch.equal(w, v):
            raise SystemExit(f"{what}: {k} differs (dtype {w.dtype}, max diff {(w.double() - v).abs().max().item()})")


def attempt(fx, seed, out_dir, work):
    arch, quant = fx["arch"], fx.get("quant")
    cfg_dict = copy.deepcopy(fx["config"])
    config = model_config(cfg_dict, os.path.join(work, "cfg"))
    gen = torch.Generator().manual_seed(seed)

    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float64, attn_implementation="eager", experts_implementation="eager"
    )
    model.eval()
    with torch.no_grad():
        fill_random(model, gen)
        round_to_stored(arch, model)
        state = model.state_dict()
        layout = published_layout(arch, state)

        published, file_tensors, quantized = {}, {}, {}
        for name in sorted(layout, key=natural_key):
            slot = layout[name]
            v = slot.get(state).clone()
            if is_quantized(quant, name, v):
                enc, deq = QUANTIZERS[quant](v)
                slot.set(state, deq)  # the reference runs on the exact dequantization
                published[name] = deq
                base = name[: -len(".weight")]
                for suffix, t in enc.items():
                    file_tensors[f"{base}.{suffix}"] = t
                quantized[name] = {suffix: f"{base}.{suffix}" for suffix in enc}
            else:
                published[name] = v
                file_tensors[name] = v.to(stored_dtype(arch, name))
        ref_state = {k: t.clone() for k, t in model.state_dict().items()}

    # Write the fixture.
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": EOS, "do_sample": False}, f, indent=2)
    write_checkpoint(out_dir, file_tensors, fx.get("shards", 1))

    # Verify what was written.
    written = read_checkpoint(out_dir)
    if set(written) != set(file_tensors):
        raise SystemExit(f"{fx['name']}: written tensor names differ")
    for name, v in published.items():
        if name in quantized:
            rows, cols = v.shape
            enc = {suffix: written[full] for suffix, full in quantized[name].items()}
            dec = DECODERS[quant](enc, rows, cols)
            if not torch.equal(dec, v):
                raise SystemExit(f"{fx['name']}: decode of {name} differs by {(dec - v).abs().max().item()}")
        else:
            t = written[name]
            if t.dtype != stored_dtype(arch, name) or not torch.equal(t.to(torch.float64), v):
                raise SystemExit(f"{fx['name']}: {name} not stored exactly")
    if quant is None:
        ref = load_reference(out_dir)
    else:
        # Dequantized copy under the published (unquantized) names, loaded by transformers.
        f64 = os.path.join(work, "f64")
        if os.path.exists(f64):
            shutil.rmtree(f64)
        os.makedirs(f64)
        shutil.copy(os.path.join(work, "cfg", "config.json"), os.path.join(f64, "config.json"))
        save_file({n: t.contiguous() for n, t in published.items()}, os.path.join(f64, "model.safetensors"), {"format": "pt"})
        ref = load_reference(f64)
    assert_same_params(ref_state, ref, fx["name"])
    del model

    # Reference logits and greedy paths.
    rng = np.random.default_rng(seed)
    watch = RouteWatch(ref)
    seqs, paths = [], []
    for i, n in enumerate((16, 23)):
        tokens = [BOS] + rng.integers(2, VOCAB - 1, size=n - 1).tolist()
        logits = forward_logits(ref, tokens)
        assert logits.shape == (n, VOCAB)
        seqs.append((tokens, logits))
    for n in (5, 11):
        prompt = [BOS] + rng.integers(2, VOCAB - 1, size=n - 1).tolist()
        generated, margin = greedy(ref, prompt, 8)
        paths.append({"prompt": prompt, "generated": generated, "min_margin": round(margin, 6)})
    watch.close()
    min_margin = min(p["min_margin"] for p in paths)
    ok = watch.min_gap > ROUTE_TIE_REL and min_margin > GREEDY_MIN_MARGIN
    print(f"  {fx['name']} seed {seed}: min route gap {watch.min_gap:.3g}, min greedy margin {min_margin:.3g}"
          f" -> {'ok' if ok else 'retry'}")
    if not ok:
        return False

    sequences = []
    for i, (tokens, logits) in enumerate(seqs):
        fname = f"logits_{i}.bin"
        logits.to(torch.float32).numpy().astype("<f4").tofile(os.path.join(out_dir, fname))
        sequences.append({"tokens": tokens, "logits": fname})
    reference = {
        "arch": fx["arch"],
        "encoding": fx["encoding"],
        "generator": "tools/make_fixtures.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "seed": seed,
        "sequences": sequences,
        "greedy": paths,
        "min_route_gap": float(f"{watch.min_gap:.6g}"),
        "tolerance": TOLERANCE,
    }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, indent=2)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures", help="folder that receives one folder per fixture")
    ap.add_argument("--only", nargs="*", help="names of fixtures to make (default: all)")
    args = ap.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    failed = []
    for fx in FIXTURES:
        if args.only and fx["name"] not in args.only:
            continue
        out_dir = os.path.join(args.out, fx["name"])
        with tempfile.TemporaryDirectory() as work:
            for seed in range(fx["seed"], fx["seed"] + MAX_SEED_TRIES):
                if attempt(fx, seed, out_dir, work):
                    break
            else:
                failed.append(fx["name"])
                shutil.rmtree(out_dir, ignore_errors=True)
        if os.path.isdir(out_dir):
            size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
            print(f"{fx['name']}: {size / 1024:.0f} KiB")
    if failed:
        raise SystemExit(f"no seed passed the tie checks for: {failed}")


if __name__ == "__main__":
    main()
