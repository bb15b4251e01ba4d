// Measuring a drive: the O_DIRECT read ceiling at a block size and queue
// depth. Used by bench_drive (drive profiles) and by streaming benchmarks,
// which measure the ceiling in the same run as the figure they compare to it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "store/io_engine.h"

namespace deltafin::store {

struct ProbeResult {
  uint64_t reads = 0;
  double seconds = 0;       // first submit to last completion
  double bytes_per_s = 0;   // payload bytes / seconds, summed over drives (each
                            // over the time until its own last read landed)
  std::vector<double> latency_s;  // per read, submit to landed, in completion order
  double percentile(double q) const;  // q in [0, 1]: latency quantile (nearest rank)
};

// `n` random record offsets of a file of `file_bytes` holding back-to-back
// records of `block` bytes each starting on a 4 KiB boundary (the store's
// layout). REQUIRES: the file holds at least one record.
std::vector<uint64_t> record_offsets(uint64_t file_bytes, uint64_t block, size_t n,
                                     uint64_t seed);

// Reads `block` bytes at offsets[0], offsets[1], ... (cycling) of `path`
// with exactly `queue_depth` reads in flight, submitting a new read as each
// lands, until `seconds` have passed and at least 2 x queue_depth reads have
// started; then waits for the last. Throws Error on any read error.
ProbeResult probe_reads(IoKind kind, const std::string& path, uint64_t block, int queue_depth,
                        double seconds, std::span<const uint64_t> offsets);

// The same over several drives at once: paths[d] is a file on drive d, read
// with queue_depth in flight on each drive; read i goes to drive i % n at
// offsets[i / n] (cycling). The aggregate ceiling of a drive set.
ProbeResult probe_reads(IoKind kind, std::span<const std::string> paths, uint64_t block,
                        int queue_depth, double seconds, std::span<const uint64_t> offsets);

}  // namespace deltafin::store
