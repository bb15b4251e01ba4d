#include "format/checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "util/error.h"

namespace deltafin {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read {}", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{} is not valid JSON", path.string());
  return j;
}

// ---- ModelConfig ----

const nlohmann::json* ModelConfig::find(std::initializer_list<const char*> keys) const {
  if (!j_.is_object()) return nullptr;
  for (const char* k : keys) {
    auto it = j_.find(k);
    if (it != j_.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

bool ModelConfig::has(std::initializer_list<const char*> keys) const { return find(keys) != nullptr; }

static std::string first_key(std::initializer_list<const char*> keys) { return *keys.begin(); }

int64_t ModelConfig::i64(std::initializer_list<const char*> keys) const {
  const auto* v = find(keys);
  if (!v) fail("{}: missing \"{}\"", label_, first_key(keys));
  if (!v->is_number_integer()) fail("{}: \"{}\" must be an integer", label_, first_key(keys));
  return v->get<int64_t>();
}

int64_t ModelConfig::i64(std::initializer_list<const char*> keys, int64_t dflt) const {
  return find(keys) ? i64(keys) : dflt;
}

double ModelConfig::f64(std::initializer_list<const char*> keys) const {
  const auto* v = find(keys);
  if (!v) fail("{}: missing \"{}\"", label_, first_key(keys));
  if (!v->is_number()) fail("{}: \"{}\" must be a number", label_, first_key(keys));
  return v->get<double>();
}

double ModelConfig::f64(std::initializer_list<const char*> keys, double dflt) const {
  return find(keys) ? f64(keys) : dflt;
}

bool ModelConfig::boolean(std::initializer_list<const char*> keys, bool dflt) const {
  const auto* v = find(keys);
  if (!v) return dflt;
  if (!v->is_boolean()) fail("{}: \"{}\" must be true or false", label_, first_key(keys));
  return v->get<bool>();
}

std::string ModelConfig::str(std::initializer_list<const char*> keys, const std::string& dflt) const {
  const auto* v = find(keys);
  if (!v) return dflt;
  if (!v->is_string()) fail("{}: \"{}\" must be a string", label_, first_key(keys));
  return v->get<std::string>();
}

const nlohmann::json* ModelConfig::object(const char* key) const {
  const auto* v = find({key});
  return v && v->is_object() ? v : nullptr;
}

// ---- Checkpoint ----

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  if (!fs::is_directory(dir))
    fail("model directory {} does not exist (give --model a Hugging Face model folder)", dir.string());
  auto ck = std::unique_ptr<Checkpoint>(new Checkpoint());
  ck->dir_ = dir;
  fs::path cfg = dir / "config.json";
  if (!fs::exists(cfg)) fail("{} has no config.json; is it a Hugging Face model folder?", dir.string());
  ck->config_ = ModelConfig(read_json_file(cfg), cfg.string());
  fs::path gen = dir / "generation_config.json";
  ck->generation_config_ = fs::exists(gen) ? read_json_file(gen) : nlohmann::json::object();

  std::vector<fs::path> shards;
  fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    auto j = read_json_file(index);
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object()) fail("{}: no \"weight_map\" object", index.string());
    std::set<std::string> names;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string()) fail("{}: weight_map entry '{}' is not a file name", index.string(), it.key());
      std::string f = it->get<std::string>();
      if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
        fail("{}: shard name '{}' must be a plain file name", index.string(), f);
      names.insert(f);
    }
    for (const auto& n : names) {
      if (!fs::exists(dir / n)) fail("{} lists shard {}, which is missing", index.string(), n);
      shards.push_back(dir / n);
    }
  } else if (fs::exists(dir / "model.safetensors")) {
    shards.push_back(dir / "model.safetensors");
  } else {
    fail("{} has neither model.safetensors nor model.safetensors.index.json", dir.string());
  }
  for (const auto& s : shards) {
    ck->files_.push_back(SafetensorsFile::open(s));
    for (const auto& [name, t] : ck->files_.back()->tensors()) {
      if (!ck->index_.emplace(name, &t).second)
        fail("tensor {} appears in more than one shard of {}", name, dir.string());
    }
  }
  return ck;
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView* t = find(name);
  if (!t) fail("{}: tensor {} is missing; the checkpoint does not match its config.json", dir_.string(), name);
  if (!shape.empty() && t->shape != shape) {
    TensorView want;
    want.shape = shape;
    fail("{}: tensor {} has shape {}, expected {} from config.json", dir_.string(), name, t->shape_str(),
         want.shape_str());
  }
  return *t;
}

static void require_dtype(const std::string& dir, const TensorView& t, DType d) {
  if (t.dtype != d)
    fail("{}: tensor {} has dtype {}, expected {}", dir, t.name, dtype_name(t.dtype), dtype_name(d));
}

bool Checkpoint::has_linear(const std::string& prefix) const {
  return find(prefix + ".weight") || find(prefix + ".weight_packed");
}

kernels::WeightView Checkpoint::linear(const std::string& prefix, int64_t out, int64_t in) const {
  return linear_weight([this](const std::string& n) { return find(n); }, prefix, out, in, dir_.string());
}

kernels::WeightView linear_weight(const TensorLookup& find, const std::string& prefix, int64_t out, int64_t in,
                                  const std::string& d) {
  using kernels::Encoding;
  auto need = [&](const std::string& name) -> const TensorView& {
    const TensorView* t = find(name);
    if (!t) fail("{}: tensor {} is missing", d, name);
    return *t;
  };
  auto shape_is = [&](const TensorView& t, std::vector<int64_t> want) {
    if (t.shape != want) {
      TensorView w;
      w.shape = want;
      fail("{}: tensor {} has shape {}, expected {}", d, t.name, t.shape_str(), w.shape_str());
    }
  };
  kernels::WeightView w;
  if (const TensorView* p = find(prefix + ".weight_packed")) {
    const TensorView& s = need(prefix + ".weight_scale");
    if (p->shape.size() != 2) fail("{}: {} must be 2-D, has shape {}", d, p->name, p->shape_str());
    const int64_t per = p->dtype == DType::I32 ? 8 : 2;
    if (out < 0) out = p->shape[0];
    if (in < 0) in = p->shape[1] * per;
    if (in % 32 != 0) fail("{}: {} has {} inputs, not a multiple of the group size 32", d, prefix, in);
    if (p->dtype == DType::I32) {
      w.enc = Encoding::INT4_G32;
      shape_is(*p, {out, in / 8});
      shape_is(s, {out, in / 32});
      require_dtype(d, s, DType::BF16);
    } else if (p->dtype == DType::U8) {
      w.enc = Encoding::MXFP4_G32;
      shape_is(*p, {out, in / 2});
      shape_is(s, {out, in / 32});
      require_dtype(d, s, DType::U8);
    } else {
      fail("{}: {} has dtype {}; expected I32 (int4) or U8 (mxfp4)", d, p->name, dtype_name(p->dtype));
    }
    w.rows = out;
    w.cols = in;
    w.data = p->data;
    w.scales = s.data;
    return w;
  }
  const TensorView& t = need(prefix + ".weight");
  if (t.shape.size() != 2) fail("{}: {} must be 2-D, has shape {}", d, t.name, t.shape_str());
  if (out < 0) out = t.shape[0];
  if (in < 0) in = t.shape[1];
  shape_is(t, {out, in});
  w.rows = out;
  w.cols = in;
  w.data = t.data;
  switch (t.dtype) {
    case DType::BF16: w.enc = Encoding::BF16; break;
    case DType::F32: w.enc = Encoding::F32; break;
    case DType::F8_E4M3: {
      w.enc = Encoding::FP8_B128;
      const TensorView& s = need(prefix + ".weight_scale_inv");
      shape_is(s, {(out + 127) / 128, (in + 127) / 128});
      require_dtype(d, s, DType::F32);
      w.scales = s.data;
      w.scale_stride = (in + 127) / 128;
      w.scale_row0 = 0;
      break;
    }
    default:
      fail("{}: {} has dtype {}, which deltafin does not read (BF16, F32, F8_E4M3, int4 or mxfp4 packs)", d,
           t.name, dtype_name(t.dtype));
  }
  return w;
}

static float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static float f16_to_float(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

std::vector<float> Checkpoint::floats(const std::string& name, int64_t n) const {
  const TensorView& t = require(name);
  if (t.numel() != n)
    fail("{}: tensor {} has {} elements (shape {}), expected {}", dir_.string(), name, t.numel(), t.shape_str(), n);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = t.data + i * static_cast<int64_t>(dtype_size(t.dtype));
    switch (t.dtype) {
      case DType::F32: std::memcpy(&v[i], p, 4); break;
      case DType::F64: { double x; std::memcpy(&x, p, 8); v[i] = static_cast<float>(x); break; }
      case DType::BF16: { uint16_t b; std::memcpy(&b, p, 2); v[i] = bf16_to_float(b); break; }
      case DType::F16: { uint16_t b; std::memcpy(&b, p, 2); v[i] = f16_to_float(b); break; }
      default:
        fail("{}: tensor {} has dtype {}; expected a float type", dir_.string(), name, dtype_name(t.dtype));
    }
  }
  return v;
}

}  // namespace deltafin
