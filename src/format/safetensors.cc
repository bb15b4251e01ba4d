#include "format/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace deltafin {

namespace {

struct DTypeInfo {
  const char* name;
  DType dtype;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {"F64", DType::F64, 8},  {"F32", DType::F32, 4},   {"F16", DType::F16, 2},
    {"BF16", DType::BF16, 2}, {"F8_E4M3", DType::F8_E4M3, 1}, {"I64", DType::I64, 8},
    {"I32", DType::I32, 4},  {"I16", DType::I16, 2},   {"I8", DType::I8, 1},
    {"U8", DType::U8, 1},    {"BOOL", DType::BOOL, 1},
};

}  // namespace

std::string_view dtype_name(DType d) { return kDTypes[static_cast<int>(d)].name; }
size_t dtype_size(DType d) { return kDTypes[static_cast<int>(d)].size; }

bool parse_dtype(std::string_view name, DType* out) {
  for (const auto& d : kDTypes)
    if (name == d.name) {
      *out = d.dtype;
      return true;
    }
  return false;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat {}: {}", path.string(), std::strerror(e));
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* p = nullptr;
  if (size > 0) {
    p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("cannot map {}: {}", path.string(), std::strerror(e));
    }
  }
  ::close(fd);
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->mapped_ = size > 0;
  f->parse_header(path.string());
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                        const std::string& label) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = label;
  f->base_ = data;
  f->size_ = size;
  f->parse_header(label);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(base_), size_);
}

void SafetensorsFile::parse_header(const std::string& label) {
  if (size_ < 8) fail("{}: not a safetensors file (shorter than its 8-byte header length)", label);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | base_[i];
  if (hlen > size_ - 8 || hlen > (100u << 20))
    fail("{}: safetensors header length {} does not fit the file ({} bytes); the file is truncated or not safetensors",
         label, hlen, size_);
  const char* hp = reinterpret_cast<const char*>(base_ + 8);
  nlohmann::json j = nlohmann::json::parse(hp, hp + hlen, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("{}: safetensors header is not a JSON object", label);
  const uint64_t data_start = 8 + hlen;
  const uint64_t data_size = size_ - data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    auto bad = [&](const char* what) {
      fail("{}: tensor '{}' has a bad header entry ({})", label, it.key(), what);
    };
    if (!e.is_object()) bad("not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) bad("dtype missing");
    if (sh == e.end() || !sh->is_array()) bad("shape missing");
    if (off == e.end() || !off->is_array() || off->size() != 2) bad("data_offsets missing");
    TensorView t;
    t.name = it.key();
    if (!parse_dtype(dt->get<std::string>(), &t.dtype)) fail("{}: tensor '{}' has unsupported dtype {}", label, it.key(), dt->get<std::string>());
    uint64_t numel = 1;
    for (const auto& s : *sh) {
      if (!s.is_number_unsigned()) bad("shape entry is not a non-negative integer");
      uint64_t v = s.get<uint64_t>();
      if (v > (1ull << 40) || (v != 0 && numel > (1ull << 50) / v)) bad("shape too large");
      numel *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) bad("offsets not integers");
    uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en || en > data_size) bad("data_offsets outside the file");
    if (en - b != numel * dtype_size(t.dtype)) bad("byte length does not match dtype and shape");
    t.data = base_ + data_start + b;
    t.bytes = en - b;
    t.file_offset = data_start + b;
    t.file = this;
    tensors_.emplace(t.name, std::move(t));
  }
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  std::string hs = h.dump();
  while ((hs.size() + 8) % 8) hs += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot write {}", path.string());
  uint64_t n = hs.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.bytes));
  if (!out) fail("error writing {}", path.string());
}

}  // namespace deltafin
