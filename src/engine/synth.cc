#include "engine/synth.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>

#include "format/checkpoint.h"
#include "model/architectures.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/parse.h"
#include "util/timer.h"

namespace deltafin {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------- values

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman & Vigna): 64 random bits per call, ~1 ns.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& v : s_) v = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return r;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);  // round to nearest even
}

// How one tensor's values are drawn.
struct Fill {
  enum Kind { Bytes, Fp8Codes, E8M0, Uniform, LogUniform, Shape } kind = Uniform;
  double center = 0, half = 0;       // Uniform: center +- half; LogUniform: log U(center, half)
  int e8m0_base = 127;               // E8M0: base or base + 1
  int32_t shape[2] = {0, 0};         // Shape: weight_shape [out, in]
};

bool ends_with(const std::string& s, const std::string& x) { return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0; }

// The input width of the linear layer a scale tensor belongs to.
int64_t input_width(const std::string& name, const std::string& suffix, const std::map<std::string, const TensorSpec*>& by_name) {
  const std::string base = name.substr(0, name.size() - suffix.size());
  for (const char* sib : {".weight", ".weight_packed"}) {
    auto it = by_name.find(base + sib);
    if (it == by_name.end()) continue;
    const TensorSpec& w = *it->second;
    if (w.dtype == DType::F8_E4M3) return w.shape[1];
    if (w.dtype == DType::I32) return w.shape[1] * 8;
    if (w.dtype == DType::U8) return w.shape[1] * 2;
  }
  fail("synth: no weight tensor found for {}", name);
}

Fill fill_for(const TensorSpec& t, const std::map<std::string, const TensorSpec*>& by_name) {
  Fill f;
  const std::string& n = t.name;
  const double s3 = std::sqrt(3.0);  // uniform half-width / std
  auto uniform_std = [&](double std) {
    f.kind = Fill::Uniform;
    f.half = std * s3;
  };
  const int64_t in = t.shape.size() == 2 ? t.shape[1] : 1;
  if (ends_with(n, ".weight_shape")) {
    const std::string base = n.substr(0, n.size() - 13);
    const TensorSpec& p = *by_name.at(base + ".weight_packed");
    f.kind = Fill::Shape;
    f.shape[0] = static_cast<int32_t>(p.shape[0]);
    f.shape[1] = static_cast<int32_t>(p.shape[1] * 8);
  } else if (ends_with(n, ".weight_packed")) {
    f.kind = Fill::Bytes;  // every INT4 / E2M1 nibble is a valid value
  } else if (ends_with(n, ".weight_scale") && t.dtype == DType::U8) {
    const double target = 1.0 / (2.93 * std::sqrt(static_cast<double>(input_width(n, ".weight_scale", by_name))));
    f.kind = Fill::E8M0;
    f.e8m0_base = 127 + static_cast<int>(std::floor(std::log2(target)));
  } else if (ends_with(n, ".weight_scale")) {  // INT4 group scales, bf16
    f.center = 1.0 / (4.64 * std::sqrt(static_cast<double>(input_width(n, ".weight_scale", by_name))));
    f.half = 0.25 * f.center;
  } else if (ends_with(n, ".weight_scale_inv")) {
    f.center = 1.0 / (1.69 * std::sqrt(static_cast<double>(input_width(n, ".weight_scale_inv", by_name))));
    f.half = 0.25 * f.center;
  } else if (t.dtype == DType::F8_E4M3) {
    f.kind = Fill::Fp8Codes;
  } else if (ends_with(n, "embed_tokens.weight")) {
    uniform_std(1.0);
  } else if (ends_with(n, "lm_head.weight")) {
    uniform_std(2.5 / std::sqrt(static_cast<double>(in)));
  } else if (ends_with(n, "norm.weight")) {
    f.center = 1.0;
    f.half = 0.1;
  } else if (ends_with(n, "_res_proj.weight")) {
    uniform_std(1.0 / std::sqrt(static_cast<double>(in)));
  } else if (ends_with(n, ".gate.weight")) {
    uniform_std(2.0 / std::sqrt(static_cast<double>(in)));
  } else if (ends_with(n, "e_score_correction_bias")) {
    uniform_std(0.01);
  } else if (ends_with(n, "A_log")) {
    f.kind = Fill::LogUniform;
    f.center = 0.5;
    f.half = 4.0;
  } else if (ends_with(n, "dt_bias") || ends_with(n, "conv1d.weight")) {
    uniform_std(0.5);
  } else if (t.shape.size() == 2) {
    uniform_std(1.0 / std::sqrt(static_cast<double>(in)));
  } else {
    uniform_std(0.1);
  }
  return f;
}

// Fills out[0, bytes) with the next values of t (bytes: whole elements).
void generate(const TensorSpec& t, const Fill& f, Rng& rng, uint8_t* out, uint64_t bytes) {
  switch (f.kind) {
    case Fill::Bytes:
    case Fill::Fp8Codes:
    case Fill::E8M0: {
      uint64_t i = 0;
      for (; i + 8 <= bytes; i += 8) {
        uint64_t r = rng.next();
        std::memcpy(out + i, &r, 8);
      }
      if (i < bytes) {
        uint64_t r = rng.next();
        std::memcpy(out + i, &r, bytes - i);
      }
      if (f.kind == Fill::Fp8Codes) {
        // sign | exponent 5..8 | mantissa: |q| in [0.25, 3.75], never 0x7f/0xff.
        for (uint64_t k = 0; k < bytes; ++k)
          out[k] = static_cast<uint8_t>((out[k] & 0x87) | ((5 + ((out[k] >> 3) & 3)) << 3));
      } else if (f.kind == Fill::E8M0) {
        for (uint64_t k = 0; k < bytes; ++k) out[k] = static_cast<uint8_t>(f.e8m0_base + (out[k] & 1));
      }
      return;
    }
    case Fill::Shape: {
      std::memcpy(out, f.shape, std::min<uint64_t>(bytes, 8));
      return;
    }
    case Fill::LogUniform: {
      float* o = reinterpret_cast<float*>(out);
      for (uint64_t k = 0; k < bytes / 4; ++k)
        o[k] = static_cast<float>(std::log(f.center + (f.half - f.center) * rng.uniform()));
      return;
    }
    case Fill::Uniform: {
      const float c = static_cast<float>(f.center), h = static_cast<float>(f.half) / 32768.0f;
      if (t.dtype == DType::BF16) {
        uint16_t* o = reinterpret_cast<uint16_t*>(out);
        const uint64_t n = bytes / 2;
        uint64_t k = 0;
        for (; k + 4 <= n; k += 4) {
          const uint64_t r = rng.next();
          for (int j = 0; j < 4; ++j) {
            const int16_t v = static_cast<int16_t>(r >> (16 * j));
            o[k + j] = to_bf16(c + h * static_cast<float>(v));
          }
        }
        for (; k < n; ++k) o[k] = to_bf16(c + h * static_cast<float>(static_cast<int16_t>(rng.next())));
      } else if (t.dtype == DType::F32) {
        float* o = reinterpret_cast<float*>(out);
        for (uint64_t k = 0; k < bytes / 4; ++k) o[k] = c + h * static_cast<float>(static_cast<int16_t>(rng.next()));
      } else {
        fail("synth: no generator for {} ({})", t.name, dtype_name(t.dtype));
      }
      return;
    }
  }
}

// ---------------------------------------------------------------- writing

class ShardFile {
 public:
  explicit ShardFile(const fs::path& p) : path_(p) {
    fd_ = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create {}: {}", p.string(), std::strerror(errno));
  }
  ~ShardFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, uint64_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<uint64_t>(n, 1u << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        fail("error writing {}: {} (disk full?)", path_.string(), std::strerror(errno));
      }
      p += w;
      n -= static_cast<uint64_t>(w);
    }
  }
  void sync() {
    if (::fdatasync(fd_) != 0) fail("cannot flush {}: {}", path_.string(), std::strerror(errno));
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

std::string shard_header(const std::vector<const TensorSpec*>& ts) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const TensorSpec* t : ts) {
    h[t->name] = {{"dtype", std::string(dtype_name(t->dtype))}, {"shape", t->shape}, {"data_offsets", {off, off + t->bytes()}}};
    off += t->bytes();
  }
  std::string s = h.dump();
  while (s.size() % 8) s += ' ';
  return s;
}

std::vector<TensorSpec> plan_of(const json& config) {
  return published_tensors(ModelConfig(config, "synth config.json"));
}

uint64_t total_bytes(const std::vector<TensorSpec>& plan) {
  uint64_t b = 0;
  for (const auto& t : plan) b += t.bytes();
  return b;
}

}  // namespace

uint64_t synth_bytes(const SynthOptions& o, int64_t layers) { return total_bytes(plan_of(synth_config(o, layers))); }

int64_t synth_layers(const SynthOptions& o) {
  if (o.size_gb > 0 && o.layers > 0) fail("give --layers or --size-gb, not both");
  if (o.layers > 0) return o.layers;
  if (o.size_gb <= 0) return 4;
  const uint64_t target = static_cast<uint64_t>(o.size_gb * 1e9);
  // At least one MoE layer: past the dense first layers.
  const json c1 = synth_config(o, 1);
  const json& t = o.arch == "kimi_k3" ? c1["text_config"] : c1;
  const int64_t lo = std::max<int64_t>(1, t.value("first_k_dense_replace", int64_t{0}) + 1);
  if (synth_bytes(o, lo) > target)
    fail("--size-gb {}: the smallest {} checkpoint with these shapes ({} layers) takes {:.2f} GB; raise --size-gb or "
         "shrink the shapes (--hidden, --experts, --vocab, ...)",
         o.size_gb, o.arch, lo, static_cast<double>(synth_bytes(o, lo)) / 1e9);
  int64_t good = lo, bad = 1001;  // bytes(good) <= target < bytes(bad)
  while (bad - good > 1) {
    const int64_t mid = (good + bad) / 2;
    if (synth_bytes(o, mid) <= target) good = mid;
    else bad = mid;
  }
  return good;
}

SynthResult synth_checkpoint(const SynthOptions& o) {
  Stopwatch clock;
  if (o.out_dir.empty()) fail("--out: give the directory to write the checkpoint to");
  const int64_t L = synth_layers(o);
  SynthResult res;
  res.layers = L;
  res.config = synth_config(o, L);
  const std::vector<TensorSpec> plan = plan_of(res.config);
  const uint64_t total = total_bytes(plan);
  const fs::path out(o.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("--out: cannot create {}: {}", out.string(), ec.message());
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    if (n == "config.json" || n.ends_with(".safetensors") || n == "model.safetensors.index.json")
      fail("--out: {} already holds a checkpoint ({}); remove it or choose another directory", out.string(), n);
  }
  struct statvfs sv;
  if (::statvfs(out.c_str(), &sv) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
    if (free_bytes < total + (64u << 20))
      fail("--out: {} has {} free, the checkpoint needs {}; free space or shrink it (--layers, --size-gb)",
           out.string(), format_bytes(static_cast<double>(free_bytes)), format_bytes(static_cast<double>(total)));
  }
  if (o.shard_bytes < (64u << 10)) fail("--shard-size: at least 64K");

  // Shards: tensors in plan order, a new shard when the next would pass the limit.
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& t : plan)
    if (!by_name.emplace(t.name, &t).second) fail("synth: tensor {} planned twice", t.name);
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t cur = 64;
  for (const auto& t : plan) {
    const uint64_t need = t.bytes() + t.name.size() + 96;  // data + its header entry
    if (need + 64 > o.shard_bytes) fail("--shard-size: tensor {} ({}) does not fit in one shard", t.name, format_bytes(static_cast<double>(t.bytes())));
    if (!shards.back().empty() && cur + need > o.shard_bytes) {
      shards.emplace_back();
      cur = 64;
    }
    shards.back().push_back(&t);
    cur += need;
  }
  const size_t S = shards.size();
  auto shard_name = [&](size_t i) {
    return S == 1 ? std::string("model.safetensors") : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, S);
  };

  {
    std::ofstream f(out / "config.json");
    f << res.config.dump(2) << "\n";
    if (!f) fail("cannot write {}", (out / "config.json").string());
  }
  {
    std::ofstream f(out / "generation_config.json");
    f << json({{"bos_token_id", 0}, {"eos_token_id", 1}, {"do_sample", false}}).dump(2) << "\n";
  }

  constexpr uint64_t kChunk = 8u << 20;
  AlignedArray<uint8_t> buf(kChunk, 4096);
  uint64_t done = 0;
  Stopwatch tick;
  json weight_map = json::object();
  for (size_t s = 0; s < S; ++s) {
    ShardFile file(out / shard_name(s));
    const std::string header = shard_header(shards[s]);
    if (8 + header.size() + [&] {
          uint64_t b = 0;
          for (const TensorSpec* t : shards[s]) b += t->bytes();
          return b;
        }() > o.shard_bytes)
      fail("synth: shard {} would exceed --shard-size (internal estimate); raise --shard-size", shard_name(s));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
    file.write(len, 8);
    file.write(header.data(), header.size());
    for (const TensorSpec* t : shards[s]) {
      weight_map[t->name] = shard_name(s);
      const Fill f = fill_for(*t, by_name);
      Rng rng(o.seed * 0x9e3779b97f4a7c15ull ^ fnv1a(t->name));
      const uint64_t n = t->bytes();
      for (uint64_t off = 0; off < n; off += kChunk) {
        const uint64_t b = std::min(kChunk, n - off);
        generate(*t, f, rng, buf.data(), b);
        file.write(buf.data(), b);
        done += b;
        if (o.progress && tick.seconds() >= 1.0) {
          tick.reset();
          fmt::print(stderr, "\rsynth: {} / {} ({:.2f} GB/s), shard {}/{}   ", format_bytes(static_cast<double>(done)),
                     format_bytes(static_cast<double>(total)), static_cast<double>(done) / clock.seconds() / 1e9, s + 1, S);
        }
      }
    }
    file.sync();
  }
  if (S > 1) {
    std::ofstream f(out / "model.safetensors.index.json");
    f << json({{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}).dump(2) << "\n";
    if (!f) fail("cannot write {}", (out / "model.safetensors.index.json").string());
  }
  {
    json opts = {{"generator", "deltafin synth"}, {"arch", o.arch}, {"seed", o.seed}, {"layers", L},
                 {"encoding", synth_encoding(o)}, {"bytes", total}};
    std::ofstream f(out / "synth.json");
    f << opts.dump(2) << "\n";
  }
  res.tensors = plan.size();
  res.bytes = total;
  res.shards = S;
  res.seconds = clock.seconds();
  if (o.progress)
    fmt::print(stderr, "\rsynth: wrote {} ({} tensors, {} layers, {} shard{}) to {} in {:.1f} s ({:.2f} GB/s)\n",
               format_bytes(static_cast<double>(total)), plan.size(), L, S, S == 1 ? "" : "s", out.string(), res.seconds,
               static_cast<double>(total) / res.seconds / 1e9);
  return res;
}

}  // namespace deltafin
