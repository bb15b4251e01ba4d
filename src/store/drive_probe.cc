#include "store/drive_probe.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "util/aligned.h"
#include "util/error.h"
#include "util/timer.h"

namespace deltafin::store {

double ProbeResult::percentile(double q) const {
  if (latency_s.empty()) return 0;
  std::vector<double> v = latency_s;
  std::sort(v.begin(), v.end());
  double rank = std::ceil(q * static_cast<double>(v.size()));
  size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::vector<uint64_t> record_offsets(uint64_t file_bytes, uint64_t block, size_t n,
                                     uint64_t seed) {
  const uint64_t stride = (block + 4095) / 4096 * 4096;
  const uint64_t records = file_bytes >= block ? (file_bytes - block) / stride + 1 : 0;
  DF_CHECK(records > 0);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out(n);
  for (auto& o : out) o = (rng() % records) * stride;
  return out;
}

ProbeResult probe_reads(IoKind kind, const std::string& path, uint64_t block, int queue_depth,
                        double seconds, std::span<const uint64_t> offsets) {
  DF_CHECK(!offsets.empty() && block > 0 && queue_depth >= 1);
  IoOptions o;
  o.queue_depth = queue_depth;
  auto e = make_io_engine(kind, o);
  const int f = e->open_file(path, 0);
  uint64_t span_bytes = 0;
  for (uint64_t off : offsets) span_bytes = std::max(span_bytes, e->span(f, off, block).bytes);
  std::vector<AlignedArray<uint8_t>> bufs;
  for (int i = 0; i < queue_depth; ++i)
    bufs.emplace_back(span_bytes, std::max<size_t>(e->file(f).mem_align, 64));
  ProbeResult r;
  size_t next = 0;
  auto issue = [&](uint64_t slot) {
    const uint64_t off = offsets[next % offsets.size()];
    ++next;
    e->submit({f, off, block, bufs[slot].data(), slot});
  };
  const size_t min_reads = 2 * static_cast<size_t>(queue_depth);
  std::vector<Completion> done;
  Stopwatch sw;
  for (int i = 0; i < queue_depth; ++i) issue(static_cast<uint64_t>(i));
  while (e->outstanding() > 0) {
    done.clear();
    e->wait(done, 1);
    for (const auto& c : done) {
      r.latency_s.push_back(c.latency_s);
      if (sw.seconds() < seconds || next < min_reads) issue(c.tag);
    }
  }
  r.seconds = sw.seconds();
  r.reads = r.latency_s.size();
  r.bytes_per_s = static_cast<double>(r.reads * block) / r.seconds;
  return r;
}

}  // namespace deltafin::store
