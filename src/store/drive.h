// Drives and where to read a record from.
//
// A drive is a directory (one per physical drive). Each has a DriveProfile
// measured by `bench_drive` (bandwidth and latency against queue depth and
// block size), kept as DIR/drive-profile.json. For a record mirrored on
// several drives, plan_read() picks the mirror expected to finish first given
// the bytes already queued on each drive, or splits the record across two
// mirrors (a split-homed read) when both halves together finish sooner.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deltafin::store {

class IoEngine;

inline constexpr const char* kDriveProfileFile = "drive-profile.json";

// The placement model of one drive: a read of B bytes queued behind Q bytes
// finishes after latency_s + (Q + B) / bandwidth_Bps seconds.
struct DriveModel {
  double bandwidth_Bps = 1e9;  // unmeasured drives are assumed equal
  double latency_s = 1e-4;
};

// One measured point: O_DIRECT reads of block_bytes, queue_depth in flight.
struct DrivePoint {
  uint64_t block_bytes = 0;
  int queue_depth = 1;
  double bytes_per_s = 0;
  double p50_s = 0, p90_s = 0, p99_s = 0;  // per-read latency, submit to landed
};

struct DriveProfile {
  std::vector<DrivePoint> points;
  std::string io;     // engine used: uring | pread
  std::string state;  // cold | warm (see docs/store.md for what cold means)
  std::string measured_at;  // UTC, ISO 8601

  // bandwidth = the best measured bytes/s; latency = the smallest queue-depth-1
  // p50 minus its transfer time at that bandwidth (>= 0). Defaults when empty.
  DriveModel model() const;

  nlohmann::json to_json() const;
  // Throws Error naming `what` (e.g. the file) on a malformed profile.
  static DriveProfile from_json(const nlohmann::json& j, const std::string& what);
  static DriveProfile load(const std::string& path);
  void save(const std::string& path) const;
};

struct MirrorLoad {
  DriveModel model;
  uint64_t queued_bytes = 0;  // already queued or in flight on that drive
};

struct ReadPart {
  int mirror = 0;       // index into the mirrors given to plan_read
  uint64_t offset = 0;  // within the record
  uint64_t length = 0;
};

struct ReadPlan {
  std::vector<ReadPart> parts;  // one, or two for a split-homed read
  double finish_s = 0;          // expected completion, seconds from now
};

// Where to read a record of `length` bytes held whole by every mirror.
// Reads it from the mirror expected to finish first, or splits it across the
// pair of mirrors whose split finishes soonest, when that is sooner than the
// best single read by more than the fraction `min_gain` (an extra request is
// not free). The split point is a multiple of `granule`. Ties go to the
// lower mirror index. Pure: the same inputs give the same plan.
// REQUIRES: !mirrors.empty(), length > 0, granule a power of two.
ReadPlan plan_read(uint64_t length, std::span<const MirrorLoad> mirrors,
                   uint64_t granule = 4096, double min_gain = 0.10);

enum class MissingDrive { Fail, Skip };

class DriveSet {
 public:
  // Each directory is one drive. With MissingDrive::Fail, throws Error naming
  // the first directory that is missing, not a directory or not readable; with
  // Skip, marks it unavailable (problem() says why) so that mirrors serve it.
  explicit DriveSet(std::vector<std::string> dirs, MissingDrive missing = MissingDrive::Fail);

  int size() const { return static_cast<int>(dirs_.size()); }
  const std::string& dir(int d) const { return dirs_.at(d); }
  bool available(int d) const { return problems_.at(d).empty(); }
  const std::string& problem(int d) const { return problems_.at(d); }
  const DriveProfile& profile(int d) const { return profiles_.at(d); }
  void set_profile(int d, DriveProfile p) { profiles_.at(d) = std::move(p); }

  // Loads DIR/drive-profile.json of each available drive that has one;
  // returns how many were loaded. Throws Error on a malformed one.
  int load_profiles();

  // plan_read over the available drives among `drives` (mirrors of one
  // record), weighing what `engine` has queued on each. Parts' `mirror`
  // index into `drives`. Throws Error naming the drives when none is
  // available.
  // min_gain as in plan_read (1.0 never splits).
  ReadPlan plan(uint64_t length, std::span<const int> drives, const IoEngine& engine,
                double min_gain = 0.10) const;

 private:
  std::vector<std::string> dirs_;
  std::vector<std::string> problems_;
  std::vector<DriveProfile> profiles_;
};

}  // namespace deltafin::store
