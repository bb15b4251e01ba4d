#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>
#include <unistd.h>

#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "util/error.h"

namespace deltafin {
namespace fs = std::filesystem;

static fs::path temp_dir(const char* name) {
  fs::path d = fs::temp_directory_path() / (std::string("deltafin_format_") + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

static std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

TEST(Safetensors, RoundTrip) {
  fs::path d = temp_dir("rt");
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {0x3f80, 0x4000};
  write_safetensors(d / "x.safetensors", {{"a", DType::F32, {2, 3}, a.data(), 24}, {"b", DType::BF16, {2}, b.data(), 4}});
  auto f = SafetensorsFile::open(d / "x.safetensors");
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorView* t = f->find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(t->data, a.data(), 24), 0);
  EXPECT_EQ(f->find("b")->dtype, DType::BF16);
  fs::remove_all(d);
}

TEST(Safetensors, RejectsMalformedHeaders) {
  const char* bad[] = {
      "not json",
      "[1,2]",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",    // size mismatch
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})",  // out of file
      R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})",     // unknown dtype
      R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",   // negative dim
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",    // reversed
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
      R"({"a":{"dtype":"F32","data_offsets":[0,8]}})",
  };
  for (const char* h : bad) {
    auto bytes = with_header(h, 8);
    EXPECT_THROW(SafetensorsFile::parse(bytes.data(), bytes.size(), "t"), Error) << h;
  }
  std::vector<uint8_t> tiny = {1, 2, 3};
  EXPECT_THROW(SafetensorsFile::parse(tiny.data(), tiny.size(), "t"), Error);
  auto huge = with_header("{}", 0);
  huge[0] = 0xff;
  huge[5] = 0x01;
  EXPECT_THROW(SafetensorsFile::parse(huge.data(), huge.size(), "t"), Error);
  auto ok = with_header(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_NO_THROW(SafetensorsFile::parse(ok.data(), ok.size(), "t"));
}

TEST(Checkpoint, ShardedLinearAndErrors) {
  fs::path d = temp_dir("ck");
  {
    std::ofstream(d / "config.json") << R"({"model_type":"x","hidden_size":4,"num_experts":3})";
    std::ofstream(d / "model.safetensors.index.json")
        << R"({"weight_map":{"l.weight":"s1.safetensors","p.weight_packed":"s2.safetensors","p.weight_scale":"s2.safetensors"}})";
  }
  std::vector<uint16_t> w(4 * 32, 0x3f80);
  write_safetensors(d / "s1.safetensors", {{"l.weight", DType::BF16, {4, 32}, w.data(), w.size() * 2}});
  std::vector<int32_t> packed(4 * 4, 0x88888888);
  std::vector<uint16_t> sc(4, 0x3f80);
  write_safetensors(d / "s2.safetensors", {{"p.weight_packed", DType::I32, {4, 4}, packed.data(), 64},
                                           {"p.weight_scale", DType::BF16, {4, 1}, sc.data(), 8}});
  auto ck = Checkpoint::open(d);
  EXPECT_EQ(ck->config().i64({"num_local_experts", "num_experts"}), 3);
  EXPECT_THROW(ck->config().i64({"missing_key"}), Error);
  auto lw = ck->linear("l", 4, 32);
  EXPECT_EQ(lw.enc, kernels::Encoding::BF16);
  auto pw = ck->linear("p", 4, 32);
  EXPECT_EQ(pw.enc, kernels::Encoding::INT4_G32);
  EXPECT_THROW(ck->linear("l", 4, 64), Error);
  EXPECT_THROW(ck->linear("nope", 4, 32), Error);
  try {
    ck->require("absent.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("absent.weight"), std::string::npos);
  }
  EXPECT_THROW(Checkpoint::open(d / "nowhere"), Error);
  fs::remove_all(d);
}

}  // namespace deltafin
