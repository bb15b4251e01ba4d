// Tensor plans: every tensor a published checkpoint of each architecture
// holds for a config.json, without data. They mirror the builders
// (deepseek_v3.cc, qwen3_moe.cc, mixtral.cc, kimi_linear.cc) name for name,
// so that a checkpoint written from a plan (deltafin synth) loads with them.
//
// Encodings follow the config's quantization_config as their makers publish:
//   none                                   every linear BF16
//   quant_method "fp8" (DeepSeek-V3)       every linear F8_E4M3 + weight_scale_inv
//                                          F32 [ceil(out/128), ceil(in/128)], except
//                                          embeddings, lm_head and the router
//   compressed-tensors "pack-quantized"    routed experts INT4: weight_packed I32
//     (Kimi K2 Thinking)                   [out, in/8], weight_scale BF16 [out, in/32],
//                                          weight_shape I32 [2]
//   compressed-tensors "mxfp4-pack-quantized"  routed experts MXFP4: weight_packed U8
//     (Kimi K3)                            [out, in/2], weight_scale U8 [out, in/32]
#include <algorithm>

#include "model/arch_common.h"
#include "model/architectures.h"

namespace deltafin {

namespace {

using kernels::Encoding;

struct Quant {
  bool fp8_all = false;                  // every linear but embeddings, head, router
  Encoding experts = Encoding::BF16;     // routed experts
};

Quant quant_of(const ModelConfig& c) {
  Quant q;
  const nlohmann::json* qc = c.object("quantization_config");
  if (!qc || qc->is_null()) return q;
  const std::string method = qc->value("quant_method", "");
  if (method == "fp8") {
    const auto bs = qc->value("weight_block_size", nlohmann::json::array());
    if (bs != nlohmann::json::array({128, 128}))
      fail("{}: quantization_config.weight_block_size must be [128, 128] (DeepSeek-V3 fp8)", c.label());
    q.fp8_all = true;
    q.experts = Encoding::FP8_B128;
    return q;
  }
  if (method == "compressed-tensors") {
    const std::string format = qc->value("format", "");
    if (format == "pack-quantized") q.experts = Encoding::INT4_G32;
    else if (format == "mxfp4-pack-quantized") q.experts = Encoding::MXFP4_G32;
    else fail("{}: compressed-tensors format '{}' is not supported (pack-quantized, mxfp4-pack-quantized are)", c.label(), format);
    return q;
  }
  fail("{}: quantization_config.quant_method '{}' is not supported (fp8, compressed-tensors are)", c.label(), method);
}

class Plan {
 public:
  Plan(const ModelConfig& c) : c_(c), q_(quant_of(c)) {}
  void add(const std::string& name, DType d, std::vector<int64_t> shape) { t_.push_back({name, d, std::move(shape)}); }
  void bf16(const std::string& name, std::vector<int64_t> shape) { add(name, DType::BF16, std::move(shape)); }
  // A linear layer `prefix` [out, in]: BF16, or quantized as the config says.
  // routed: a routed expert's matrix; router: never quantized.
  void linear(const std::string& prefix, int64_t out, int64_t in, bool routed = false, bool router = false) {
    Encoding e = Encoding::BF16;
    if (routed) e = q_.experts;
    else if (q_.fp8_all && !router) e = Encoding::FP8_B128;
    switch (e) {
      case Encoding::FP8_B128:
        add(prefix + ".weight", DType::F8_E4M3, {out, in});
        add(prefix + ".weight_scale_inv", DType::F32, {(out + 127) / 128, (in + 127) / 128});
        break;
      case Encoding::INT4_G32:
        if (in % 32) fail("{}: an int4 expert matrix needs an input size divisible by 32, not {}", c_.label(), in);
        add(prefix + ".weight_packed", DType::I32, {out, in / 8});
        add(prefix + ".weight_scale", DType::BF16, {out, in / 32});
        add(prefix + ".weight_shape", DType::I32, {2});
        break;
      case Encoding::MXFP4_G32:
        if (in % 32) fail("{}: an MXFP4 expert matrix needs an input size divisible by 32, not {}", c_.label(), in);
        add(prefix + ".weight_packed", DType::U8, {out, in / 2});
        add(prefix + ".weight_scale", DType::U8, {out, in / 32});
        break;
      default:
        add(prefix + ".weight", DType::BF16, {out, in});
    }
  }
  void mlp(const std::string& p, int64_t H, int64_t inter, const char* g = "gate_proj", const char* u = "up_proj",
           const char* d = "down_proj", bool routed = false) {
    linear(p + "." + g, inter, H, routed);
    linear(p + "." + u, inter, H, routed);
    linear(p + "." + d, H, inter, routed);
  }
  // Embeddings, final norm and (untied) lm_head.
  void head(int64_t V, int64_t H) {
    bf16("model.embed_tokens.weight", {V, H});
    bf16("model.norm.weight", {H});
    if (!c_.boolean({"tie_word_embeddings"}, false)) bf16("lm_head.weight", {V, H});
  }
  // MLA as deepseek_v3 / kimi_linear publish it at `a` ("...self_attn.").
  void mla(const std::string& a, int64_t H) {
    const int64_t nh = c_.i64({"num_attention_heads"}), q_lora = c_.i64({"q_lora_rank"}, 0);
    const int64_t kv_lora = c_.i64({"kv_lora_rank"}), nope = c_.i64({"qk_nope_head_dim"});
    const int64_t rope = c_.i64({"qk_rope_head_dim"}), vdim = c_.i64({"v_head_dim"});
    if (q_lora > 0) {
      linear(a + "q_a_proj", q_lora, H);
      bf16(a + "q_a_layernorm.weight", {q_lora});
      linear(a + "q_b_proj", nh * (nope + rope), q_lora);
    } else {
      linear(a + "q_proj", nh * (nope + rope), H);
    }
    linear(a + "kv_a_proj_with_mqa", kv_lora + rope, H);
    bf16(a + "kv_a_layernorm.weight", {kv_lora});
    linear(a + "kv_b_proj", nh * (nope + vdim), kv_lora);
    linear(a + "o_proj", H, nh * vdim);
  }
  // GQA q/k/v/o (+ per-head q_norm/k_norm) at `a`.
  void gqa(const std::string& a, int64_t H, bool qk_norm) {
    const int64_t nh = c_.i64({"num_attention_heads"}), nkv = c_.i64({"num_key_value_heads"}, nh);
    const int64_t hd = c_.i64({"head_dim"}, H / nh);
    linear(a + "q_proj", nh * hd, H);
    linear(a + "k_proj", nkv * hd, H);
    linear(a + "v_proj", nkv * hd, H);
    linear(a + "o_proj", H, nh * hd);
    if (qk_norm) {
      bf16(a + "q_norm.weight", {hd});
      bf16(a + "k_norm.weight", {hd});
    }
  }
  std::vector<TensorSpec> take() { return std::move(t_); }

 private:
  const ModelConfig& c_;
  Quant q_;
  std::vector<TensorSpec> t_;
};

std::string layer_prefix(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

}  // namespace

std::vector<TensorSpec> deepseek_v3_tensors(const ModelConfig& c) {
  Plan p(c);
  const int64_t H = c.i64({"hidden_size"}), V = c.i64({"vocab_size"}), L = c.i64({"num_hidden_layers"});
  const int64_t E = c.i64({"n_routed_experts"}, 0), first_dense = c.i64({"first_k_dense_replace"}, 0);
  const int64_t freq = c.i64({"moe_layer_freq"}, 1), moe_inter = c.i64({"moe_intermediate_size"}, 0);
  const int64_t dense_inter = c.i64({"intermediate_size"}), n_shared = c.i64({"n_shared_experts"}, 0);
  arch::check_range(c, "num_hidden_layers", L, 1, 1000);
  p.head(V, H);
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = layer_prefix(l);
    p.bf16(pre + "input_layernorm.weight", {H});
    p.bf16(pre + "post_attention_layernorm.weight", {H});
    p.mla(pre + "self_attn.", H);
    if (E > 0 && l >= first_dense && l % freq == 0) {
      p.linear(pre + "mlp.gate", E, H, false, /*router=*/true);
      p.add(pre + "mlp.gate.e_score_correction_bias", DType::F32, {E});
      if (n_shared > 0) p.mlp(pre + "mlp.shared_experts", H, moe_inter * n_shared);
      for (int64_t e = 0; e < E; ++e)
        p.mlp(pre + "mlp.experts." + std::to_string(e), H, moe_inter, "gate_proj", "up_proj", "down_proj", true);
    } else {
      p.mlp(pre + "mlp", H, dense_inter);
    }
  }
  return p.take();
}

std::vector<TensorSpec> qwen3_moe_tensors(const ModelConfig& c) {
  Plan p(c);
  const int64_t H = c.i64({"hidden_size"}), V = c.i64({"vocab_size"}), L = c.i64({"num_hidden_layers"});
  const int64_t E = c.i64({"num_experts"}, 0), step = c.i64({"decoder_sparse_step"}, 1);
  const int64_t moe_inter = c.i64({"moe_intermediate_size"}, 0), dense_inter = c.i64({"intermediate_size"});
  std::vector<int64_t> mlp_only;
  if (c.json().contains("mlp_only_layers") && c.json()["mlp_only_layers"].is_array())
    for (const auto& v : c.json()["mlp_only_layers"]) mlp_only.push_back(v.get<int64_t>());
  arch::check_range(c, "num_hidden_layers", L, 1, 1000);
  arch::check_range(c, "decoder_sparse_step", step, 1, 1000);
  p.head(V, H);
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = layer_prefix(l);
    p.bf16(pre + "input_layernorm.weight", {H});
    p.bf16(pre + "post_attention_layernorm.weight", {H});
    p.gqa(pre + "self_attn.", H, /*qk_norm=*/true);
    if (E > 0 && (l + 1) % step == 0 && std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end()) {
      p.linear(pre + "mlp.gate", E, H, false, /*router=*/true);
      for (int64_t e = 0; e < E; ++e)
        p.mlp(pre + "mlp.experts." + std::to_string(e), H, moe_inter, "gate_proj", "up_proj", "down_proj", true);
    } else {
      p.mlp(pre + "mlp", H, dense_inter);
    }
  }
  return p.take();
}

std::vector<TensorSpec> mixtral_tensors(const ModelConfig& c) {
  Plan p(c);
  const int64_t H = c.i64({"hidden_size"}), V = c.i64({"vocab_size"}), L = c.i64({"num_hidden_layers"});
  const int64_t E = c.i64({"num_local_experts"}), inter = c.i64({"intermediate_size"});
  arch::check_range(c, "num_hidden_layers", L, 1, 1000);
  p.head(V, H);
  for (int64_t l = 0; l < L; ++l) {
    const std::string pre = layer_prefix(l);
    p.bf16(pre + "input_layernorm.weight", {H});
    p.bf16(pre + "post_attention_layernorm.weight", {H});
    p.gqa(pre + "self_attn.", H, /*qk_norm=*/false);
    p.linear(pre + "block_sparse_moe.gate", E, H, false, /*router=*/true);
    for (int64_t e = 0; e < E; ++e)
      p.mlp(pre + "block_sparse_moe.experts." + std::to_string(e), H, inter, "w1", "w3", "w2", true);
  }
  return p.take();
}

std::vector<TensorSpec> kimi_linear_tensors(const ModelConfig& c) {
  Plan p(c);
  const int64_t H = c.i64({"hidden_size"}), V = c.i64({"vocab_size"}), L = c.i64({"num_hidden_layers"});
  const int64_t E = c.i64({"num_experts", "num_local_experts"});
  const int64_t n_shared = c.i64({"num_shared_experts", "n_shared_experts"}, 1);
  const int64_t moe_inter = c.i64({"moe_intermediate_size"}), dense_inter = c.i64({"intermediate_size"});
  const int64_t first_dense = c.i64({"first_k_dense_replace"}, 1);
  const nlohmann::json* la = c.object("linear_attn_config");
  if (!la || !la->contains("full_attn_layers") || !la->contains("kda_layers"))
    fail("{}: linear_attn_config with full_attn_layers and kda_layers is needed to plan the tensors", c.label());
  const int64_t heads = la->value("num_heads", int64_t{32}), dk = la->value("head_dim", int64_t{128});
  const int64_t conv_k = la->value("short_conv_kernel_size", int64_t{4});
  const int64_t D = heads * dk;
  arch::check_range(c, "num_hidden_layers", L, 1, 1000);
  std::vector<int> kda(L, -1);
  for (const char* key : {"full_attn_layers", "kda_layers"})
    for (const auto& v : (*la)[key]) {
      const int64_t one_based = v.get<int64_t>();
      if (one_based < 1 || one_based > L) fail("{}: linear_attn_config.{} lists layer {} (layers are 1..{})", c.label(), key, one_based, L);
      kda[one_based - 1] = std::string(key) == "kda_layers";
    }
  p.head(V, H);
  for (int64_t l = 0; l < L; ++l) {
    if (kda[l] < 0) fail("{}: layer {} is in neither full_attn_layers nor kda_layers", c.label(), l + 1);
    const std::string pre = layer_prefix(l), a = pre + "self_attn.";
    p.bf16(pre + "input_layernorm.weight", {H});
    p.bf16(pre + "post_attention_layernorm.weight", {H});
    if (kda[l]) {
      for (const char* x : {"q", "k", "v"}) {
        p.linear(a + x + "_proj", D, H);
        p.add(a + x + "_conv1d.weight", DType::F32, {D, 1, conv_k});
      }
      p.linear(a + "f_a_proj", dk, H);
      p.linear(a + "f_b_proj", D, dk);
      p.add(a + "A_log", DType::F32, {1, 1, heads, 1});
      p.add(a + "dt_bias", DType::F32, {D});
      p.linear(a + "b_proj", heads, H);
      p.linear(a + "g_a_proj", dk, H);
      p.linear(a + "g_b_proj", D, dk);
      p.bf16(a + "o_norm.weight", {dk});
      p.linear(a + "o_proj", H, D);
    } else {
      p.mla(a, H);
    }
    if (l >= first_dense) {
      const std::string m = pre + "block_sparse_moe.";
      p.linear(m + "gate", E, H, false, /*router=*/true);
      p.add(m + "gate.e_score_correction_bias", DType::F32, {E});
      if (n_shared > 0) p.mlp(m + "shared_experts", H, moe_inter * n_shared);
      for (int64_t e = 0; e < E; ++e) p.mlp(m + "experts." + std::to_string(e), H, moe_inter, "w1", "w3", "w2", true);
    } else {
      p.mlp(pre + "mlp", H, dense_inter);
    }
  }
  return p.take();
}

std::vector<TensorSpec> published_tensors(const ModelConfig& c) {
  const std::string type = c.str({"model_type"}, "");
  if (type == "deepseek_v3" || type == "kimi_k2") return deepseek_v3_tensors(c);
  if (type == "qwen3_moe") return qwen3_moe_tensors(c);
  if (type == "mixtral") return mixtral_tensors(c);
  if (type == "kimi_linear") return kimi_linear_tensors(c);
  if (type == "kimi_k3") return kimi_k3_tensors(c);
  fail("{}: no tensor plan for model_type '{}' (deepseek_v3, kimi_k2, qwen3_moe, mixtral, kimi_linear, kimi_k3 have one)",
       c.label(), type);
}

}  // namespace deltafin
