#include "store/drive_probe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "util/error.h"

namespace deltafin::store {
namespace {

TEST(RecordOffsets, StayInsideTheFileOnRecordBoundaries) {
  const uint64_t block = 17547264, stride = 17547264;  // already 4 KiB-aligned
  auto offs = record_offsets(10 * stride + 5, block, 1000, 3);
  std::set<uint64_t> distinct(offs.begin(), offs.end());
  EXPECT_EQ(distinct.size(), 10u);
  for (uint64_t o : offs) {
    EXPECT_EQ(o % stride, 0u);
    EXPECT_LE(o + block, 10 * stride + 5);
  }
  auto odd = record_offsets(1 << 20, 5000, 100, 1);  // stride rounds up to 8192
  for (uint64_t o : odd) {
    EXPECT_EQ(o % 8192, 0u);
    EXPECT_LE(o + 5000, 1u << 20);
  }
}

TEST(ProbeReads, CountsEveryReadAndKeepsQueueDepth) {
  std::string p = std::filesystem::temp_directory_path() / "deltafin_probe_test.bin";
  {
    std::ofstream f(p, std::ios::binary);
    std::vector<char> z(1 << 20, 7);
    f.write(z.data(), z.size());
  }
  auto offs = record_offsets(1 << 20, 65536, 64, 9);
  for (IoKind k : {IoKind::Uring, IoKind::Pread}) {
    // seconds = 0: exactly 2 x queue_depth reads.
    ProbeResult r = probe_reads(k, p, 65536, 3, 0.0, offs);
    EXPECT_EQ(r.reads, 6u);
    EXPECT_EQ(r.latency_s.size(), 6u);
    EXPECT_GT(r.bytes_per_s, 0);
    EXPECT_GE(r.bytes_per_s * r.seconds, 6.0 * 65536 - 1.0);  // rate over the time to its last read
    EXPECT_LE(r.bytes_per_s * r.seconds, 6.0 * 65536 * 1.5);
    EXPECT_LE(r.percentile(0.5), r.percentile(1.0));
  }
  // Two drives: each keeps 2 in flight; seconds = 0 gives 2 x 2 x 2 reads.
  std::vector<std::string> two = {p, p};
  ProbeResult r2 = probe_reads(IoKind::Uring, two, 65536, 2, 0.0, offs);
  EXPECT_EQ(r2.reads, 8u);
  EXPECT_GE(r2.bytes_per_s * r2.seconds, 8.0 * 65536 - 1.0);  // each drive's rate over its own time
  // A record past the end of the file is an error, not a silent short read.
  std::vector<uint64_t> bad = {1 << 20};
  EXPECT_THROW(probe_reads(IoKind::Uring, p, 65536, 1, 0.0, bad), Error);
  std::filesystem::remove(p);
}

}  // namespace
}  // namespace deltafin::store
