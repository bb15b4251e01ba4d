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
  return probe_reads(kind, std::span<const std::string>(&path, 1), block, queue_depth, seconds,
                     offsets);
}

ProbeResult probe_reads(IoKind kind, std::span<const std::string> paths, uint64_t block,
                        int queue_depth, double seconds, std::span<const uint64_t> offsets) {
  DF_CHECK(!paths.empty() && !offsets.empty() && block > 0 && queue_depth >= 1);
  IoOptions o;
  o.queue_depth = queue_depth;
  auto e = make_io_engine(kind, o);
  std::vector<int> files;
  for (size_t d = 0; d < paths.size(); ++d) files.push_back(e->open_file(paths[d], static_cast<int>(d)));
  const size_t n = files.size();
  uint64_t span_bytes = 0;
  for (uint64_t off : offsets) span_bytes = std::max(span_bytes, e->span(files[0], off, block).bytes);
  const size_t slots = n * static_cast<size_t>(queue_depth);
  std::vector<AlignedArray<uint8_t>> bufs;
  for (size_t i = 0; i < slots; ++i)
    bufs.emplace_back(span_bytes, std::max<size_t>(e->file(files[0]).mem_align, 64));
  ProbeResult r;
  std::vector<size_t> next(n, 0);  // reads issued per drive
  size_t issued = 0;
  // Slot s always reads drive s % n, so each drive keeps queue_depth in flight.
  auto issue = [&](uint64_t slot) {
    const size_t d = slot % n;
    const uint64_t off = offsets[next[d] % offsets.size()];
    ++next[d];
    ++issued;
    e->submit({files[d], off, block, bufs[slot].data(), slot});
  };
  const size_t min_reads = 2 * slots;
  std::vector<Completion> done;
  std::vector<uint64_t> landed(n, 0);
  std::vector<double> last(n, 0);  // when each drive's last read landed
  Stopwatch sw;
  for (size_t i = 0; i < slots; ++i) issue(i);
  while (e->outstanding() > 0) {
    done.clear();
    e->wait(done, 1);
    const double now = sw.seconds();
    for (const auto& c : done) {
      r.latency_s.push_back(c.latency_s);
      ++landed[c.drive];
      last[c.drive] = now;
      if (now < seconds || issued < min_reads) issue(c.tag);
    }
  }
  r.seconds = sw.seconds();
  r.reads = r.latency_s.size();
  // Drives run independently: the set's ceiling is the sum of each drive's
  // rate over its own busy time (a slow drive draining its last reads does
  // not count against a fast one).
  for (size_t d = 0; d < n; ++d)
    if (last[d] > 0) r.bytes_per_s += static_cast<double>(landed[d] * block) / last[d];
  return r;
}

}  // namespace deltafin::store
