#include "store/manifest.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace deltafin::store {
namespace {

namespace fs = std::filesystem;

// Two layers x three experts, mirrored on two drives.
Manifest sample() {
  Manifest m;
  m.complete = true;
  m.placement = "mirror";
  m.drives = {"/mnt/a/store", "/mnt/b/store"};
  RecordLayout l;
  l.tensors = {{"gate_proj.weight", "F8_E4M3", {64, 32}, 0, 2048},
               {"gate_proj.weight_scale_inv", "F32", {1, 1}, 2048, 4},
               {"down_proj.weight", "F8_E4M3", {32, 64}, 4096, 2048}};
  l.bytes = 8192;
  m.layouts = {l};
  m.files = {{0, "experts-0.bin", 6 * 8192}, {1, "experts-0.bin", 6 * 8192}};
  uint64_t off = 0;
  for (int layer = 1; layer <= 2; ++layer)
    for (int e = 0; e < 3; ++e) {
      m.records.push_back({layer, e, 0, 8192, 0xfedcba9876543210ull + off, {{0, off}, {1, off}}});
      off += 8192;
    }
  m.model_config = {{"model_type", "deepseek_v3"}, {"n_routed_experts", 3}};
  m.source = {{"dir", "/models/x"}, {"files", {{{"name", "model.safetensors"}, {"bytes", 123}}}}};
  m.index();
  return m;
}

TEST(Manifest, JsonRoundTripAndLookup) {
  Manifest m = sample();
  m.validate("m");
  Manifest q = Manifest::from_json(m.to_json(), "m");
  EXPECT_EQ(q.to_json(), m.to_json());
  const Record* r = q.find(2, 1);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->copies[1].offset, 4u * 8192);
  EXPECT_EQ(r->checksum, 0xfedcba9876543210ull + 4 * 8192);
  EXPECT_EQ(q.find(3, 0), nullptr);
  EXPECT_EQ(q.layouts[0].tensors[1].shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(q.model_config["model_type"], "deepseek_v3");
  EXPECT_EQ(m.to_json()["records"][0]["xxh64"], "fedcba9876543210");
}

// Each broken manifest is refused with a message naming what is wrong.
TEST(Manifest, RefusesInconsistentStores) {
  auto expect_error = [](const Manifest& m, const std::string& needle) {
    try {
      m.validate("STORE");
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("STORE"), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  Manifest m = sample();
  m.records[4].copies[0].offset = 100;
  expect_error(m, "not a multiple of 4096");
  m = sample();
  m.records[5].copies[1].offset = 6 * 8192;
  expect_error(m, "past the end");
  m = sample();
  m.records[2].expert = 1;
  expect_error(m, "repeats layer 1 expert 1");
  m = sample();
  m.records[0].length = 4096;
  expect_error(m, "layout says 8192");
  m = sample();
  m.records[0].copies[1].file = 7;
  expect_error(m, "file 7");
  m = sample();
  m.records[0].copies[1].file = 0;
  m.records[0].copies[1].offset = 8192;
  expect_error(m, "two copies on drive 0");
  m = sample();
  m.layouts[0].tensors[2].offset = 1024;
  expect_error(m, "overlapping");
  m = sample();
  m.files[1].drive = 2;
  expect_error(m, "only 2 drives");
  m = sample();
  m.files[0].name = "../escape.bin";
  expect_error(m, "relative");
  m = sample();
  m.version = 2;
  expect_error(m, "version 2");
}

TEST(Manifest, ParseErrorsNameTheField) {
  nlohmann::json j = sample().to_json();
  j["records"][3].erase("xxh64");
  try {
    Manifest::from_json(j, "M");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("records[3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("xxh64"), std::string::npos) << e.what();
  }
  j = sample().to_json();
  j["records"][0]["xxh64"] = "12xy";
  EXPECT_THROW(Manifest::from_json(j, "M"), Error);
  j = sample().to_json();
  j["records"][0]["length"] = -5;
  EXPECT_THROW(Manifest::from_json(j, "M"), Error);
  j = sample().to_json();
  j["records"][0]["copies"] = {{0}};
  EXPECT_THROW(Manifest::from_json(j, "M"), Error);
  j = sample().to_json();
  j["format"] = "something-else";
  EXPECT_THROW(Manifest::from_json(j, "M"), Error);
}

TEST(Manifest, SaveLoadAndIncompleteStores) {
  std::string t = fs::temp_directory_path() / "deltafin_manifest_test_XXXXXX";
  ASSERT_NE(::mkdtemp(t.data()), nullptr);
  Manifest m = sample();
  m.save(t + "/" + kManifestFile);
  Manifest q = Manifest::load(t);  // the store directory
  EXPECT_EQ(q.records.size(), 6u);
  ASSERT_NE(q.find(1, 2), nullptr);
  m.complete = false;
  m.save(t + "/" + kManifestFile);
  try {
    Manifest::load(t);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("re-run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Manifest::load(t, /*require_complete=*/false).complete, false);
  std::ofstream(t + "/" + kManifestFile) << "{ broken";
  EXPECT_THROW(Manifest::load(t), Error);
  fs::remove_all(t);
  try {
    Manifest::load(t);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(t), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltafin::store
