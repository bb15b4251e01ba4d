// bench_drive: the O_DIRECT read ceiling of one drive directory.
//
// For each engine (io_uring, pread), block size (default: one Kimi K3 expert
// record, 17,547,264 bytes, and one Qwen3-30B-A3B Q4_0 expert, 2,654,208
// bytes = 2.6 MB) and queue depth (1..32), reads
// random block-aligned records of a test file with exactly `qd` reads in
// flight for --seconds, and reports GB/s and per-read latency percentiles.
// Each point runs --repeat times per state (the median GB/s is reported),
// cold first, then warm over the same offsets:
//   cold: this machine's page cache dropped first (drop_caches when root,
//         and POSIX_FADV_DONTNEED). O_DIRECT bypasses that cache anyway; a
//         hypervisor or the device may still hold the blocks (see
//         shared/MEASURING.md): it is cold for this machine only.
//   warm: the same offsets again right away, so every lower cache holds them.
// With --file PATH an existing file is read instead (nothing is written):
// a file not touched since boot gives a host-cold first pass.
//
// Writes a markdown report (with the JSON of every point) to --results and,
// with --profile-out, the drive's DriveProfile (cold, first engine) for
// placement.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "store/drive.h"
#include "store/drive_probe.h"
#include "store/io_engine.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/parse.h"
#include "util/timer.h"

namespace deltafin::store {
namespace {

using nlohmann::json;

// One point: the median GB/s of `repeat` runs, latency percentiles over all
// their reads.
struct Point {
  std::string io, state;
  uint64_t block = 0;
  int qd = 0;
  uint64_t reads = 0;
  double seconds = 0, gbps = 0, gbps_min = 0, gbps_max = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

std::string utc_now(const char* fmt) {
  std::time_t t = std::time(nullptr);
  char b[64];
  std::strftime(b, sizeof b, fmt, std::gmtime(&t));
  return b;
}

std::string read_first_line_with(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return line;
  return "";
}

// The mount holding `path`: "source (fstype) on mountpoint".
std::string mount_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "?";
  std::string want = fmt::format("{}:{}", major(st.st_dev), minor(st.st_dev));
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, devno, root, mnt;
    ss >> id >> parent >> devno >> root >> mnt;
    if (devno != want) continue;
    std::string tok;
    while (ss >> tok && tok != "-") {}
    std::string fstype, source;
    ss >> fstype >> source;
    return fmt::format("{} ({}) on {}", source, fstype, mnt);
  }
  return "?";
}

// Empties this machine's page cache of the file (and all of it when root).
bool drop_caches(int fd) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::sync();
  FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w");
  if (!f) return false;
  bool ok = std::fputs("1\n", f) >= 0;
  return (std::fclose(f) == 0) && ok;
}

// Writes `bytes` of pseudo-random data (not compressible, not deduplicable)
// with O_DIRECT in 8 MiB blocks; returns GB/s.
double write_test_file(const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create {}: {}", path, std::strerror(errno));
  const size_t blk = 8 << 20;
  AlignedArray<uint64_t> buf(blk / 8, 4096);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  Stopwatch sw;
  for (uint64_t done = 0; done < bytes; done += blk) {
    for (size_t i = 0; i < buf.size(); ++i) {  // xorshift64
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      buf[i] = s;
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(blk, bytes - done));
    if (::pwrite(fd, buf.data(), n, static_cast<off_t>(done)) != static_cast<ssize_t>(n)) {
      int e = errno;
      ::close(fd);
      fail("writing {} failed: {}; check free space (df)", path, std::strerror(e));
    }
  }
  ::fsync(fd);
  ::close(fd);
  return static_cast<double>(bytes) / sw.seconds() / 1e9;
}

json point_json(const Point& p) {
  return {{"io", p.io},       {"state", p.state}, {"block_bytes", p.block}, {"queue_depth", p.qd},
          {"reads", p.reads}, {"seconds", p.seconds}, {"GBps", p.gbps},
          {"GBps_min", p.gbps_min}, {"GBps_max", p.gbps_max},  {"p50_ms", p.p50 * 1e3},
          {"p90_ms", p.p90 * 1e3}, {"p99_ms", p.p99 * 1e3}, {"max_ms", p.max * 1e3}};
}

int run(int argc, char** argv) {
  CLI::App app{"bench_drive: O_DIRECT read ceiling of a drive directory"};
  std::string dir, file, results, profile_out, json_out;
  std::string file_size = "4G", blocks = "17547264,2654208", qds = "1,2,4,8,16,32",
              ios = "uring,pread", states = "cold,warm";
  double seconds = 0.4;
  int repeat = 3;
  bool keep = false;
  app.add_option("--dir", dir, "drive directory to measure (a test file is written there)");
  app.add_option("--file", file, "measure this existing file instead (read only)");
  app.add_option("--file-size", file_size, "size of the test file")->capture_default_str();
  app.add_option("--blocks", blocks, "block sizes (bytes, K/M/G)")->capture_default_str();
  app.add_option("--qd", qds, "queue depths")->capture_default_str();
  app.add_option("--io", ios, "engines: uring,pread")->capture_default_str();
  app.add_option("--states", states, "cold,warm")->capture_default_str();
  app.add_option("--seconds", seconds, "seconds per point and state")->capture_default_str();
  app.add_option("--repeat", repeat, "runs per point and state (median reported)")
      ->capture_default_str();
  app.add_option("--results", results, "append a markdown report to this file");
  app.add_option("--json", json_out, "write every point as JSON to this file");
  app.add_option("--profile-out", profile_out, "write the drive profile (cold, first engine)");
  app.add_flag("--keep", keep, "keep the test file");
  CLI11_PARSE(app, argc, argv);
  if (dir.empty() == file.empty()) fail("give exactly one of --dir DIR or --file PATH");

  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string t;
    while (std::getline(ss, t, ',')) v.push_back(t);
    return v;
  };
  std::vector<uint64_t> block_list;
  for (auto& b : split(blocks)) block_list.push_back(parse_byte_size(b, "--blocks"));
  std::vector<int> qd_list;
  for (auto& q : split(qds)) qd_list.push_back(static_cast<int>(parse_byte_size(q, "--qd")));
  std::vector<IoKind> io_list;
  for (auto& s : split(ios)) io_list.push_back(parse_io_kind(s));
  std::vector<std::string> state_list = split(states);
  for (auto& s : state_list)
    if (s != "cold" && s != "warm") fail("--states: '{}' is not cold or warm", s);

  bool wrote = false;
  double write_gbps = 0;
  std::string path = file;
  if (path.empty()) {
    DriveSet drives({dir});  // a clear error when the directory is missing
    path = dir + "/deltafin-bench-drive.dat";
    uint64_t bytes = parse_byte_size(file_size, "--file-size");
    std::printf("writing %s (%s) ...\n", path.c_str(), format_bytes(static_cast<double>(bytes)).c_str());
    write_gbps = write_test_file(path, bytes);
    wrote = true;
    std::printf("written at %.2f GB/s (O_DIRECT, fsync)\n", write_gbps);
  }
  uint64_t fsize;
  uint32_t dio_mem = 0, dio_off = 0;
  int cfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (cfd < 0) fail("cannot open {}: {}", path, std::strerror(errno));
  {
    auto e = make_io_engine(IoKind::Pread, {});
    int f = e->open_file(path);
    fsize = e->file(f).size;
    dio_mem = e->file(f).mem_align;
    dio_off = e->file(f).offset_align;
  }

  const std::string mount = mount_of(path);
  const std::string load_before = read_first_line_with("/proc/loadavg", "");
  std::vector<Point> points;
  bool dropped_all = true;
  std::printf("%-6s %-5s %12s %4s %7s %8s %11s %8s %8s %8s\n", "io", "state", "block", "qd",
              "reads", "GB/s", "min-max", "p50 ms", "p90 ms", "p99 ms");
  uint64_t seed = 12345;
  for (IoKind kind : io_list) {
    for (uint64_t block : block_list) {
      if (fsize < block) fail("{} is too small for {}-byte blocks; use a larger --file-size", path, block);
      for (int qd : qd_list) {
        // Each repeat reads its own offsets; warm re-reads those cold read.
        std::vector<std::vector<uint64_t>> offsets;
        for (int r = 0; r < repeat; ++r) offsets.push_back(record_offsets(fsize, block, 4096, seed++));
        std::vector<uint64_t> cold_reads(repeat, 0);
        for (const auto& state : state_list) {
          Point p;
          p.io = io_kind_name(kind);
          p.state = state;
          p.block = block;
          p.qd = qd;
          std::vector<double> gbps, lat;
          for (int r = 0; r < repeat; ++r) {
            std::span<const uint64_t> offs(offsets[r]);
            if (state == "cold") dropped_all &= drop_caches(cfd);
            if (state == "warm" && cold_reads[r] > 0)
              offs = offs.first(std::min<size_t>(cold_reads[r], offs.size()));
            ProbeResult pr = probe_reads(kind, path, block, qd, seconds, offs);
            if (state == "cold") cold_reads[r] = pr.reads;
            gbps.push_back(pr.bytes_per_s / 1e9);
            lat.insert(lat.end(), pr.latency_s.begin(), pr.latency_s.end());
            p.reads += pr.reads;
            p.seconds += pr.seconds;
          }
          std::sort(gbps.begin(), gbps.end());
          p.gbps = gbps[gbps.size() / 2];
          p.gbps_min = gbps.front();
          p.gbps_max = gbps.back();
          ProbeResult all;
          all.latency_s = std::move(lat);
          p.p50 = all.percentile(0.5);
          p.p90 = all.percentile(0.9);
          p.p99 = all.percentile(0.99);
          p.max = all.percentile(1.0);
          std::printf("%-6s %-5s %12llu %4d %7llu %8.2f %5.2f-%-5.2f %8.2f %8.2f %8.2f\n",
                      p.io.c_str(), p.state.c_str(), static_cast<unsigned long long>(block), qd,
                      static_cast<unsigned long long>(p.reads), p.gbps, p.gbps_min, p.gbps_max,
                      p.p50 * 1e3, p.p90 * 1e3, p.p99 * 1e3);
          std::fflush(stdout);
          points.push_back(p);
        }
      }
    }
  }
  ::close(cfd);
  if (wrote && !keep) ::unlink(path.c_str());

  // Machine and configuration, for the report.
  struct utsname un {};
  ::uname(&un);
  std::string cpu = read_first_line_with("/proc/cpuinfo", "model name");
  if (auto c = cpu.find(':'); c != std::string::npos) cpu = cpu.substr(c + 2);
  std::string mem = read_first_line_with("/proc/meminfo", "MemTotal");
  json cfg = {{"file", path},
              {"file_bytes", fsize},
              {"written_by_bench", wrote},
              {"write_GBps", write_gbps},
              {"mount", mount},
              {"dio_mem_align", dio_mem},
              {"dio_offset_align", dio_off},
              {"seconds_per_run", seconds},
              {"runs_per_point", repeat},
              {"page_cache_dropped", dropped_all ? "drop_caches + fadvise" : "fadvise only (not root)"},
              {"kernel", std::string(un.release)},
              {"cpu", cpu},
              {"cores", ::sysconf(_SC_NPROCESSORS_ONLN)},
              {"memory", mem},
              {"loadavg_before", load_before},
              {"loadavg_after", read_first_line_with("/proc/loadavg", "")},
              {"date", utc_now("%Y-%m-%dT%H:%M:%SZ")}};
  json all = {{"config", cfg}, {"points", json::array()}};
  for (const auto& p : points) all["points"].push_back(point_json(p));

  if (!json_out.empty()) std::ofstream(json_out) << all.dump(2) << "\n";
  if (!profile_out.empty()) {
    DriveProfile prof;
    prof.io = io_kind_name(io_list.front());
    prof.state = state_list.front();
    prof.measured_at = cfg["date"];
    for (const auto& p : points)
      if (p.io == prof.io && p.state == prof.state)
        prof.points.push_back({p.block, p.qd, p.gbps * 1e9, p.p50, p.p90, p.p99});
    prof.save(profile_out);
  }
  if (!results.empty()) {
    std::ofstream out(results, std::ios::app);
    out << "\n## bench_drive, " << cfg["date"].get<std::string>() << "\n\n";
    out << "Command: `bench_drive";
    for (int i = 1; i < argc; ++i) out << " " << argv[i];
    out << "`\n\n";
    out << "- file: " << path << " (" << fsize << " bytes, "
        << (wrote ? fmt::format("written by the bench at {:.2f} GB/s", write_gbps)
                  : std::string("existing file, read only"))
        << ")\n";
    out << "- mount: " << mount << "; STATX_DIOALIGN mem/offset: " << dio_mem << "/"
        << dio_off << "\n";
    out << "- machine: " << cpu << ", " << cfg["cores"] << " cores, " << mem << ", kernel "
        << un.release << "\n";
    out << "- load average before/after (the machine is shared): " << load_before << " / "
        << cfg["loadavg_after"].get<std::string>() << "\n";
    out << "- cold = " << cfg["page_cache_dropped"].get<std::string>()
        << " before the point; warm = the same offsets re-read right after. Reads are O_DIRECT, "
           "so 'cold' is cold for this machine only: the host may cache blocks it has seen.\n\n";
    out << "GB/s is the median of " << repeat << " runs of " << seconds
        << " s (min-max beside it); latency percentiles pool all their reads.\n\n";
    out << "| io | state | block bytes | qd | reads | GB/s | min-max | p50 ms | p90 ms | p99 ms |\n";
    out << "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& p : points)
      out << fmt::format("| {} | {} | {} | {} | {} | {:.2f} | {:.2f}-{:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
                         p.io, p.state, p.block, p.qd, p.reads, p.gbps, p.gbps_min, p.gbps_max,
                         p.p50 * 1e3, p.p90 * 1e3, p.p99 * 1e3);
    out << "\n<details><summary>JSON</summary>\n\n```json\n" << all.dump(1) << "\n```\n</details>\n";
  }
  return 0;
}

}  // namespace
}  // namespace deltafin::store

int main(int argc, char** argv) {
  try {
    return deltafin::store::run(argc, argv);
  } catch (const deltafin::Error& e) {
    std::fprintf(stderr, "bench_drive: %s\n", e.what());
    return 1;
  }
}
