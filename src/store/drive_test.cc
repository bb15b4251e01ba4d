#include "store/drive.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "store/io_engine.h"
#include "util/aligned.h"
#include "util/error.h"

namespace deltafin::store {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kExpert = 17547264;  // one Kimi K3 expert record

MirrorLoad drive(double gbps, double lat_ms, uint64_t queued = 0) {
  return {{gbps * 1e9, lat_ms * 1e-3}, queued};
}

TEST(PlanRead, OneMirrorReadsWhole) {
  MirrorLoad m[] = {drive(2, 0.1)};
  ReadPlan p = plan_read(kExpert, m);
  ASSERT_EQ(p.parts.size(), 1u);
  EXPECT_EQ(p.parts[0].mirror, 0);
  EXPECT_EQ(p.parts[0].length, kExpert);
  EXPECT_NEAR(p.finish_s, 1e-4 + kExpert / 2e9, 1e-9);
}

TEST(PlanRead, TwoIdleEqualMirrorsSplitInHalf) {
  MirrorLoad m[] = {drive(2, 0.1), drive(2, 0.1)};
  ReadPlan p = plan_read(kExpert, m);
  ASSERT_EQ(p.parts.size(), 2u);
  EXPECT_EQ(p.parts[0].mirror, 0);
  EXPECT_EQ(p.parts[1].mirror, 1);
  EXPECT_EQ(p.parts[0].offset, 0u);
  EXPECT_EQ(p.parts[0].length % 4096, 0u);
  EXPECT_EQ(p.parts[1].offset, p.parts[0].length);
  EXPECT_EQ(p.parts[0].length + p.parts[1].length, kExpert);
  EXPECT_LE(std::abs(static_cast<double>(p.parts[0].length) - kExpert / 2.0), 4096.0);
  EXPECT_LT(p.finish_s, 0.55 * (1e-4 + kExpert / 2e9) + 1e-4);
}

TEST(PlanRead, SplitFollowsBandwidth) {
  MirrorLoad m[] = {drive(1, 0), drive(2, 0)};  // the second is twice as fast
  ReadPlan p = plan_read(3 * 1048576, m);
  ASSERT_EQ(p.parts.size(), 2u);
  EXPECT_EQ(p.parts[0].length, 1048576u);
  EXPECT_EQ(p.parts[1].length, 2097152u);
}

TEST(PlanRead, BusyDriveIsAvoided) {
  MirrorLoad m[] = {drive(2, 0.1, 8 * kExpert), drive(2, 0.1)};
  ReadPlan p = plan_read(kExpert, m);
  ASSERT_EQ(p.parts.size(), 1u);
  EXPECT_EQ(p.parts[0].mirror, 1);
}

TEST(PlanRead, SmallRecordsAreNotSplitWhenLatencyDominates) {
  MirrorLoad m[] = {drive(2, 0.2), drive(2, 0.2)};
  ReadPlan p = plan_read(65536, m);
  ASSERT_EQ(p.parts.size(), 1u);
  EXPECT_EQ(p.parts[0].mirror, 0);  // tie: the lower index
  // The split would be 7 % sooner: below the default 10 % gain, above 5 %.
  EXPECT_EQ(plan_read(65536, m, 4096, 0.05).parts.size(), 2u);
}

TEST(PlanRead, BestPairOfThree) {
  MirrorLoad m[] = {drive(0.5, 0.1), drive(2, 0.1), drive(2, 0.1)};
  ReadPlan p = plan_read(kExpert, m);
  ASSERT_EQ(p.parts.size(), 2u);
  EXPECT_EQ(p.parts[0].mirror, 1);
  EXPECT_EQ(p.parts[1].mirror, 2);
}

TEST(DriveProfile, ModelFromPoints) {
  DriveProfile p;
  EXPECT_EQ(p.model().bandwidth_Bps, DriveModel{}.bandwidth_Bps);  // unmeasured: defaults
  p.points = {{kExpert, 1, 1.5e9, 0.0120, 0.013, 0.02},
              {kExpert, 8, 3.0e9, 0.0400, 0.05, 0.06},
              {4096, 1, 0.04e9, 0.0001, 0.0002, 0.0003}};
  DriveModel m = p.model();
  EXPECT_DOUBLE_EQ(m.bandwidth_Bps, 3.0e9);
  // min(0.012 - 17547264/3e9, 0.0001 - 4096/3e9)
  EXPECT_NEAR(m.latency_s, 0.0001 - 4096 / 3e9, 1e-12);
}

TEST(DriveProfile, JsonRoundTripAndErrors) {
  DriveProfile p;
  p.io = "uring";
  p.state = "cold";
  p.measured_at = "2026-11-30T05:00:00Z";
  p.points = {{kExpert, 4, 2.5e9, 0.02, 0.03, 0.04}};
  DriveProfile q = DriveProfile::from_json(p.to_json(), "x");
  ASSERT_EQ(q.points.size(), 1u);
  EXPECT_EQ(q.points[0].block_bytes, kExpert);
  EXPECT_EQ(q.points[0].queue_depth, 4);
  EXPECT_DOUBLE_EQ(q.points[0].p90_s, 0.03);
  EXPECT_EQ(q.io, "uring");
  nlohmann::json bad = p.to_json();
  bad["version"] = 9;
  EXPECT_THROW(DriveProfile::from_json(bad, "x"), Error);
  bad = p.to_json();
  bad["points"][0].erase("bytes_per_s");
  EXPECT_THROW(DriveProfile::from_json(bad, "x"), Error);
}

class TempDirs : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = fs::temp_directory_path() / "deltafin_drive_test_XXXXXX";
    ASSERT_NE(::mkdtemp(t.data()), nullptr);
    root_ = t;
    fs::create_directory(root_ / "d0");
    fs::create_directory(root_ / "d1");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(TempDirs, MissingDriveIsAnErrorNamingIt) {
  std::string gone = root_ / "d9";
  try {
    DriveSet s({root_ / "d0", gone});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(gone), std::string::npos) << e.what();
  }
  std::ofstream(root_ / "file") << "x";
  EXPECT_THROW(DriveSet({root_ / "file"}), Error);
  EXPECT_THROW(DriveSet({}), Error);
}

TEST_F(TempDirs, SkippedDriveIsServedByItsMirror) {
  std::string gone = root_ / "d9";
  DriveSet s({root_ / "d0", gone}, MissingDrive::Skip);
  EXPECT_TRUE(s.available(0));
  EXPECT_FALSE(s.available(1));
  EXPECT_NE(s.problem(1).find(gone), std::string::npos);
  auto e = make_io_engine(IoKind::Pread);
  int both[] = {1, 0};
  ReadPlan p = s.plan(kExpert, both, *e);
  ASSERT_EQ(p.parts.size(), 1u);
  EXPECT_EQ(p.parts[0].mirror, 1);  // index into `both`: drive 0
  int only_gone[] = {1};
  try {
    s.plan(kExpert, only_gone, *e);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(gone), std::string::npos);
  }
}

TEST_F(TempDirs, PlanWeighsQueuedBytesAndLoadsProfiles) {
  DriveSet s({root_ / "d0", root_ / "d1"});
  EXPECT_EQ(s.load_profiles(), 0);
  DriveProfile p;
  p.points = {{kExpert, 1, 2e9, 0.009, 0.01, 0.011}};
  p.save(root_ / "d0" / kDriveProfileFile);
  p.save(root_ / "d1" / kDriveProfileFile);
  EXPECT_EQ(s.load_profiles(), 2);
  EXPECT_DOUBLE_EQ(s.profile(1).model().bandwidth_Bps, 2e9);

  // Queue reads on drive 0; io_uring keeps them outstanding until polled.
  std::string path = root_ / "d0" / "data";
  {
    std::ofstream f(path, std::ios::binary);
    std::vector<char> z(1 << 20, 1);
    f.write(z.data(), z.size());
  }
  auto e = make_io_engine(IoKind::Uring);
  int f = e->open_file(path, 0);
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(aligned_alloc_bytes(1 << 20, 4096)));
  e->submit({f, 0, 1 << 20, buf.get(), 1});
  EXPECT_EQ(e->queued_bytes(0), 1u << 20);
  int both[] = {0, 1};
  ReadPlan plan = s.plan(65536, both, *e);
  ASSERT_EQ(plan.parts.size(), 1u);
  EXPECT_EQ(plan.parts[0].mirror, 1);
  std::vector<Completion> done;
  e->wait(done, 1);
}

TEST(DriveProfile, LoadNamesABadFile) {
  std::string p = fs::temp_directory_path() / "deltafin_bad_profile.json";
  std::ofstream(p) << "{not json";
  try {
    DriveProfile::load(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
  }
  fs::remove(p);
}

}  // namespace
}  // namespace deltafin::store
