// Read-only, memory-mapped safetensors files (8-byte little-endian header
// length, JSON header {name: {dtype, shape, data_offsets}}, then raw data).
// The header is untrusted input: every offset, shape and size is validated
// before a view is handed out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deltafin {

enum class DType : uint8_t { F64, F32, F16, BF16, F8_E4M3, I64, I32, I16, I8, U8, BOOL };

std::string_view dtype_name(DType d);
// "BF16" -> DType::BF16; false for an unknown name.
bool parse_dtype(std::string_view name, DType* out);
size_t dtype_size(DType d);

class SafetensorsFile;

// One tensor: a view into its file's mapping. Valid while the file is open.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t file_offset = 0;  // absolute offset of the data in the file
  const SafetensorsFile* file = nullptr;

  int64_t numel() const;
  std::string shape_str() const;  // "[64, 128]"
};

class SafetensorsFile {
 public:
  // Maps `path` and parses its header. Throws Error naming the file on any
  // malformed header (bad length, JSON, dtype, shape, offsets out of range).
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  // Parses a header from bytes already in memory (the fuzzer's entry point).
  // `data` must stay alive as long as the result.
  static std::unique_ptr<SafetensorsFile> parse(const uint8_t* data, size_t size,
                                                const std::string& label);
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  // Raw mapping (for readers that copy whole records).
  const uint8_t* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  SafetensorsFile() = default;
  void parse_header(const std::string& label);

  std::filesystem::path path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::map<std::string, TensorView> tensors_;
};

// Writes tensors to a safetensors file (used by synth, tests and pack).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  uint64_t bytes;
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors);

}  // namespace deltafin
