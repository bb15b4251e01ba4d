#include "store/expert_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <fstream>
#include <random>

#include "store/checksum.h"
#include "util/aligned.h"
#include "util/error.h"

namespace deltafin::store {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kLen = 300000;     // record bytes (not a multiple of 4096)
constexpr uint64_t kStride = 303104;  // 4 KiB-aligned slot
constexpr int kLayers = 2, kExperts = 5;

// A mirrored store on two drive directories, written the way pack will.
class StoreTest : public ::testing::TestWithParam<IoKind> {
 protected:
  void SetUp() override {
    std::string t = fs::temp_directory_path() / "deltafin_expert_store_XXXXXX";
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    root_ = t;
    fs::create_directories(root_ / "store");
    fs::create_directories(root_ / "d0");
    fs::create_directories(root_ / "d1");
    std::mt19937_64 rng(5);
    const int n = kLayers * kExperts;
    data_.resize(n * kStride);
    for (auto& b : data_) b = static_cast<uint8_t>(rng());
    for (const char* d : {"d0", "d1"}) {
      std::ofstream f(root_ / d / "experts.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(data_.data()), static_cast<std::streamsize>(data_.size()));
    }
    Manifest m;
    m.complete = true;
    m.placement = "mirror";
    m.drives = {root_ / "d0", root_ / "d1"};
    m.files = {{0, "experts.bin", data_.size()}, {1, "experts.bin", data_.size()}};
    m.layouts = {{kLen, {{"w", "U8", {static_cast<int64_t>(kLen)}, 0, kLen}}}};
    for (int i = 0; i < n; ++i) {
      uint64_t off = static_cast<uint64_t>(i) * kStride;
      m.records.push_back({1 + i / kExperts, i % kExperts, 0, kLen,
                           xxh64(data_.data() + off, kLen), {{0, off}, {1, off}}});
    }
    m.save(root_ / "store" / kManifestFile);
  }
  void TearDown() override { fs::remove_all(root_); }

  const uint8_t* expected(int layer, int expert) const {
    return data_.data() + static_cast<uint64_t>((layer - 1) * kExperts + expert) * kStride;
  }
  // Flips one byte of a record's copy on `drive`.
  void corrupt(const char* drive, int layer, int expert, uint64_t at = 1000) {
    std::fstream f(root_ / drive / "experts.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(((layer - 1) * kExperts + expert) * kStride + at));
    char c = static_cast<char>(expected(layer, expert)[at] ^ 0xff);
    f.write(&c, 1);
  }

  std::unique_ptr<IoEngine> engine(int qd = 4, std::function<int64_t(const RawRead&)> fault = {}) {
    IoOptions o;
    o.queue_depth = qd;
    o.fault = std::move(fault);
    return make_io_engine(GetParam(), o);
  }

  static StoreOptions opts(bool verify, bool split = true, MissingDrive missing = MissingDrive::Fail) {
    StoreOptions o;
    o.verify_reads = verify;
    o.split_reads = split;
    o.missing = missing;
    return o;
  }

  // Reads every record; returns how many were split-homed.
  int read_all(ExpertStore& s) {
    std::vector<AlignedArray<uint8_t>> bufs;
    uint64_t tag = 0;
    for (int l = 1; l <= kLayers; ++l)
      for (int e = 0; e < kExperts; ++e) {
        const Record* r = s.manifest().find(l, e);
        bufs.emplace_back(s.buffer_bytes(*r), s.buffer_alignment());
        s.request(l, e, bufs.back().data(), tag++);
      }
    std::vector<RecordCompletion> done;
    while (s.outstanding() > 0) s.wait(done, 3);
    EXPECT_EQ(done.size(), bufs.size());
    int split = 0;
    for (const auto& c : done) {
      EXPECT_EQ(c.bytes, bufs[c.tag].data());
      EXPECT_EQ(std::memcmp(c.bytes, expected(c.record->layer, c.record->expert), kLen), 0)
          << "layer " << c.record->layer << " expert " << c.record->expert;
      split += c.parts == 2;
    }
    return split;
  }

  fs::path root_;
  std::vector<uint8_t> data_;
};

TEST_P(StoreTest, ReadsEveryRecordExactlyAndSplitsAcrossMirrors) {
  auto e = engine();
  ExpertStore s(root_ / "store", *e, opts(true));
  int split = read_all(s);
  EXPECT_GT(split, 0);  // idle equal mirrors: 300 KB records are split-homed
  EXPECT_GT(s.bytes_read(0), 0u);
  EXPECT_GT(s.bytes_read(1), 0u);
  EXPECT_EQ(s.bytes_read(0) + s.bytes_read(1), uint64_t{kLayers} * kExperts * kLen);
}

TEST_P(StoreTest, NoSplitWhenDisabled) {
  auto e = engine();
  ExpertStore s(root_ / "store", *e, opts(false, false));
  EXPECT_EQ(read_all(s), 0);
  EXPECT_GT(s.bytes_read(1), 0u);  // still spread by queued bytes
}

TEST_P(StoreTest, MissingDriveFailsOrFallsBackToItsMirror) {
  fs::rename(root_ / "d1", root_ / "gone");
  auto e = engine();
  try {
    ExpertStore s(root_ / "store", *e);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find((root_ / "d1").string()), std::string::npos) << err.what();
  }
  ExpertStore s(root_ / "store", *e, opts(true, true, MissingDrive::Skip));
  EXPECT_EQ(read_all(s), 0);
  EXPECT_EQ(s.bytes_read(1), 0u);
}

TEST_P(StoreTest, CorruptRecordIsAnErrorWithVerifyReads) {
  corrupt("d0", 2, 3);
  fs::rename(root_ / "d1", root_ / "gone");  // only the corrupt copy is left
  auto e = engine();
  ExpertStore s(root_ / "store", *e, opts(true, true, MissingDrive::Skip));
  const Record* r = s.manifest().find(2, 3);
  AlignedArray<uint8_t> buf(s.buffer_bytes(*r), s.buffer_alignment());
  s.request(2, 3, buf.data(), 77);
  std::vector<RecordCompletion> done;
  try {
    s.wait(done, 1);
    FAIL() << "corrupt data was returned";
  } catch (const ReadError& err) {
    EXPECT_EQ(err.tag(), 77u);
    std::string msg = err.what();
    EXPECT_NE(msg.find("checksum mismatch"), std::string::npos) << msg;
    EXPECT_NE(msg.find((root_ / "d0" / "experts.bin").string()), std::string::npos) << msg;
  }
  EXPECT_EQ(s.outstanding(), 0u);
  EXPECT_TRUE(done.empty());
}

TEST_P(StoreTest, CorruptHalfOfASplitReadIsReadAgainWhole) {
  // Idle equal mirrors: the first half comes from d0, the second from d1,
  // whose copy is corrupt near the end. The joined record fails its checksum
  // and is read again whole from d0 (engine-verified): good bytes, one part.
  corrupt("d1", 1, 0, kLen - 1000);
  auto e = engine();
  ExpertStore s(root_ / "store", *e, opts(true));
  const Record* r = s.manifest().find(1, 0);
  AlignedArray<uint8_t> buf(s.buffer_bytes(*r), s.buffer_alignment());
  s.request(1, 0, buf.data(), 5);
  std::vector<RecordCompletion> done;
  s.wait(done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].parts, 1);
  EXPECT_EQ(done[0].attempts, 3);  // two halves, then the whole record again
  EXPECT_EQ(std::memcmp(done[0].bytes, expected(1, 0), kLen), 0);
  EXPECT_GT(s.bytes_read(1), 0u);                             // it was split
  EXPECT_EQ(s.bytes_read(0) + s.bytes_read(1), 2 * kLen);  // and read again whole
}

TEST_P(StoreTest, ChunkedReadsLandWholeInPieces) {
  // --read-chunk: every record read as pieces of 64 KiB, each exact, and a
  // completion only once all of a record's pieces have landed.
  auto e = engine(2);
  StoreOptions o = opts(true, false);
  o.chunk_bytes = 64 << 10;
  ExpertStore s(root_ / "store", *e, o);
  std::vector<AlignedArray<uint8_t>> bufs;
  for (int x = 0; x < 6; ++x) {
    const Record* r = s.manifest().find(1 + x % kLayers, x % kExperts);
    bufs.emplace_back(s.buffer_bytes(*r), s.buffer_alignment());
    s.request(r->layer, r->expert, bufs.back().data(), static_cast<uint64_t>(x));
  }
  std::vector<RecordCompletion> done;
  while (s.outstanding() > 0) s.wait(done, 1);
  ASSERT_EQ(done.size(), 6u);
  for (const auto& c : done) {
    EXPECT_EQ(c.parts, static_cast<int>((kLen + (64 << 10) - 1) / (64 << 10)));
    EXPECT_EQ(std::memcmp(c.bytes, expected(c.record->layer, c.record->expert), kLen), 0);
  }
  EXPECT_EQ(s.bytes_read(0) + s.bytes_read(1), 6 * kLen);
}

TEST_P(StoreTest, CorruptRecordIsAnErrorWithChunkedReads) {
  // Both copies corrupt: the joined pieces fail the checksum, the record is
  // read again whole (engine-verified), fails again and is reported.
  corrupt("d0", 2, 3);
  corrupt("d1", 2, 3);
  auto e = engine();
  StoreOptions o = opts(true);
  o.chunk_bytes = 64 << 10;
  ExpertStore s(root_ / "store", *e, o);
  const Record* r = s.manifest().find(2, 3);
  AlignedArray<uint8_t> buf(s.buffer_bytes(*r), s.buffer_alignment());
  s.request(2, 3, buf.data(), 9);
  std::vector<RecordCompletion> done;
  try {
    s.wait(done, 1);
    FAIL() << "corrupt data was returned";
  } catch (const ReadError& err) {
    EXPECT_EQ(err.tag(), 9u);
    EXPECT_NE(std::string(err.what()).find("checksum mismatch"), std::string::npos) << err.what();
  }
  EXPECT_EQ(s.outstanding(), 0u);
}

TEST_P(StoreTest, UnknownRecordAndMismatchedDrivesAreErrors) {
  auto e = engine();
  ExpertStore s(root_ / "store", *e);
  AlignedArray<uint8_t> buf(s.buffer_bytes(s.manifest().records[0]), s.buffer_alignment());
  EXPECT_THROW(s.request(7, 0, buf.data(), 1), Error);
  StoreOptions one;
  one.drives = {root_ / "d0"};
  EXPECT_THROW(ExpertStore(root_ / "store", *e, one), Error);
}

TEST_P(StoreTest, TruncatedDataFileIsRefusedAtOpen) {
  fs::resize_file(root_ / "d1" / "experts.bin", kStride * 3);
  auto e = engine();
  try {
    ExpertStore s(root_ / "store", *e);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("truncated"), std::string::npos) << err.what();
  }
}

TEST_P(StoreTest, CancelDropsRecordsNotStarted) {
  // Reads are held (the pread engine's workers wait; io_uring's completions
  // are not reaped) until released, so that the queued ones cannot start.
  std::atomic<bool> release{false};
  std::atomic<int> entered{0};
  auto e = engine(/*qd=*/1, [&](const RawRead& r) -> int64_t {
    ++entered;
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return r.result;
  });
  ExpertStore s(root_ / "store", *e, opts(false, false));
  std::vector<AlignedArray<uint8_t>> bufs;
  for (int i = 0; i < 8; ++i) {
    bufs.emplace_back(s.buffer_bytes(s.manifest().records[i]), s.buffer_alignment());
    s.request(s.manifest().records[i].layer, s.manifest().records[i].expert, bufs.back().data(), i);
  }
  // io_uring started one read per drive at submit; pread workers start them
  // on their own: wait until both have.
  if (GetParam() == IoKind::Pread)
    for (int i = 0; i < 5000 && entered.load() < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(s.cancel(0));  // in flight (one per drive)
  EXPECT_TRUE(s.cancel(7));
  EXPECT_TRUE(s.cancel(6));
  EXPECT_FALSE(s.cancel(6));
  release = true;
  std::vector<RecordCompletion> done;
  while (s.outstanding() > 0) s.wait(done, 1);
  EXPECT_EQ(done.size(), 6u);
  for (const auto& c : done) EXPECT_LT(c.tag, 6u);
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreTest, ::testing::Values(IoKind::Uring, IoKind::Pread),
                         [](const auto& info) { return std::string(io_kind_name(info.param)); });

}  // namespace
}  // namespace deltafin::store
