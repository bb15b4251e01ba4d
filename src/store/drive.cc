#include "store/drive.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "store/io_engine.h"
#include "util/error.h"

namespace deltafin::store {

using nlohmann::json;

DriveModel DriveProfile::model() const {
  DriveModel m;
  if (points.empty()) return m;
  double bw = 0;
  for (const auto& p : points) bw = std::max(bw, p.bytes_per_s);
  if (bw <= 0) return m;
  m.bandwidth_Bps = bw;
  double lat = std::numeric_limits<double>::infinity();
  for (const auto& p : points)
    if (p.queue_depth == 1 && p.p50_s > 0)
      lat = std::min(lat, std::max(0.0, p.p50_s - static_cast<double>(p.block_bytes) / bw));
  if (std::isfinite(lat)) m.latency_s = lat;
  return m;
}

json DriveProfile::to_json() const {
  json pts = json::array();
  for (const auto& p : points)
    pts.push_back({{"block_bytes", p.block_bytes},
                   {"queue_depth", p.queue_depth},
                   {"bytes_per_s", p.bytes_per_s},
                   {"p50_s", p.p50_s},
                   {"p90_s", p.p90_s},
                   {"p99_s", p.p99_s}});
  return {{"format", "deltafin-drive-profile"},
          {"version", 1},
          {"io", io},
          {"state", state},
          {"measured_at", measured_at},
          {"points", pts}};
}

DriveProfile DriveProfile::from_json(const json& j, const std::string& what) {
  try {
    if (j.value("format", "") != "deltafin-drive-profile")
      fail("{}: not a drive profile (no \"format\": \"deltafin-drive-profile\"); re-run bench_drive",
           what);
    if (j.at("version").get<int>() != 1)
      fail("{}: drive profile version {} is not supported (expected 1); re-run bench_drive", what,
           j.at("version").get<int>());
    DriveProfile p;
    p.io = j.value("io", "");
    p.state = j.value("state", "");
    p.measured_at = j.value("measured_at", "");
    for (const auto& q : j.at("points")) {
      DrivePoint d;
      d.block_bytes = q.at("block_bytes").get<uint64_t>();
      d.queue_depth = q.at("queue_depth").get<int>();
      d.bytes_per_s = q.at("bytes_per_s").get<double>();
      d.p50_s = q.at("p50_s").get<double>();
      d.p90_s = q.at("p90_s").get<double>();
      d.p99_s = q.at("p99_s").get<double>();
      if (d.block_bytes == 0 || d.queue_depth < 1 || !(d.bytes_per_s >= 0))
        fail("{}: a point has an invalid block size, queue depth or bandwidth", what);
      p.points.push_back(d);
    }
    return p;
  } catch (const json::exception& e) {
    fail("{}: malformed drive profile ({}); re-run bench_drive", what, e.what());
  }
}

DriveProfile DriveProfile::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read drive profile {}: {}", path, std::strerror(errno));
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) fail("{}: not valid JSON; re-run bench_drive to rewrite it", path);
  return from_json(j, path);
}

void DriveProfile::save(const std::string& path) const {
  std::ofstream out(path);
  out << to_json().dump(2) << "\n";
  if (!out) fail("cannot write drive profile {}", path);
}

namespace {

double finish(const MirrorLoad& m, uint64_t bytes) {
  return m.model.latency_s +
         static_cast<double>(m.queued_bytes + bytes) / m.model.bandwidth_Bps;
}

}  // namespace

ReadPlan plan_read(uint64_t length, std::span<const MirrorLoad> mirrors, uint64_t granule,
                   double min_gain) {
  DF_CHECK(!mirrors.empty() && length > 0);
  DF_CHECK(granule && (granule & (granule - 1)) == 0);
  ReadPlan best;
  best.finish_s = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < mirrors.size(); ++i) {
    double t = finish(mirrors[i], length);
    if (t < best.finish_s) {
      best.finish_s = t;
      best.parts = {{static_cast<int>(i), 0, length}};
    }
  }
  ReadPlan split;
  split.finish_s = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < mirrors.size(); ++a) {
    for (size_t b = a + 1; b < mirrors.size(); ++b) {
      const MirrorLoad& A = mirrors[a];
      const MirrorLoad& B = mirrors[b];
      // x bytes from A, the rest from B, so that both finish together:
      // la + (qa + x)/ba = lb + (qb + L - x)/bb.
      double ia = 1.0 / A.model.bandwidth_Bps, ib = 1.0 / B.model.bandwidth_Bps;
      double x = (B.model.latency_s - A.model.latency_s +
                  static_cast<double>(B.queued_bytes + length) * ib -
                  static_cast<double>(A.queued_bytes) * ia) /
                 (ia + ib);
      x = std::clamp(x, 0.0, static_cast<double>(length));
      uint64_t xa = static_cast<uint64_t>(std::llround(x / static_cast<double>(granule))) * granule;
      xa = std::min(xa, length);
      if (xa == 0 || xa == length) continue;  // not a split
      double t = std::max(finish(A, xa), finish(B, length - xa));
      if (t < split.finish_s) {
        split.finish_s = t;
        split.parts = {{static_cast<int>(a), 0, xa}, {static_cast<int>(b), xa, length - xa}};
      }
    }
  }
  if (split.finish_s < best.finish_s * (1.0 - min_gain)) return split;
  return best;
}

DriveSet::DriveSet(std::vector<std::string> dirs, MissingDrive missing) : dirs_(std::move(dirs)) {
  if (dirs_.empty()) fail("no drive directories given; pass --drives DIR[,DIR...]");
  for (const auto& d : dirs_) {
    std::string problem;
    struct stat st {};
    if (::stat(d.c_str(), &st) != 0)
      problem = fmt::format("drive directory {} is not reachable ({}); mount the drive or fix "
                            "--drives", d, std::strerror(errno));
    else if (!S_ISDIR(st.st_mode))
      problem = fmt::format("drive {} is not a directory; --drives takes one directory per drive", d);
    else if (::access(d.c_str(), R_OK | X_OK) != 0)
      problem = fmt::format("drive directory {} is not readable ({}); fix its permissions", d,
                            std::strerror(errno));
    if (!problem.empty() && missing == MissingDrive::Fail) throw Error(problem);
    problems_.push_back(std::move(problem));
  }
  profiles_.resize(dirs_.size());
}

int DriveSet::load_profiles() {
  int n = 0;
  for (int d = 0; d < size(); ++d) {
    if (!available(d)) continue;
    std::string p = dirs_[d] + "/" + kDriveProfileFile;
    if (::access(p.c_str(), F_OK) != 0) continue;
    profiles_[d] = DriveProfile::load(p);
    ++n;
  }
  return n;
}

ReadPlan DriveSet::plan(uint64_t length, std::span<const int> drives, const IoEngine& engine,
                        double min_gain) const {
  std::vector<MirrorLoad> loads;
  std::vector<int> index;  // position in `drives` of each load
  for (size_t i = 0; i < drives.size(); ++i) {
    int d = drives[i];
    if (!available(d)) continue;
    loads.push_back({profiles_.at(d).model(), engine.queued_bytes(d)});
    index.push_back(static_cast<int>(i));
  }
  if (loads.empty()) {
    std::string names;
    for (int d : drives) names += (names.empty() ? "" : ", ") + dirs_.at(d);
    fail("no drive holding this record is available ({}); mount one of them", names);
  }
  ReadPlan p = plan_read(length, loads, 4096, min_gain);
  for (auto& part : p.parts) part.mirror = index[part.mirror];
  return p;
}

}  // namespace deltafin::store
