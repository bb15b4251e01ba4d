// bench_store_stream: expert reads through ExpertStore against the drives'
// own O_DIRECT ceiling, measured in the same run.
//
// Writes a synthetic store (random records of --record bytes, --layers x
// --experts of them, mirrored on every drive or striped over them) with a
// manifest, then alternates:
//   ceiling   probe_reads over all drives, --qd in flight per drive, random
//             records of the same size (the drives' ceiling at that block)
//   barrier   decode-like: per layer, request --topk distinct random experts
//             and wait for all of them before the next layer (no compute)
//   pipelined the same, but the next layer's reads are issued before waiting
//             for this layer's (what a perfect pilot prefetch would give)
// with split-homed reads on and (for mirrors) off. Each mode runs --seconds;
// the ceiling is measured before and after, and fractions are against their
// mean. "cold" as in bench_drive: this machine's page cache is dropped before
// each run; the host may still cache the blocks (shared/MEASURING.md).
// DELTAFIN_BENCH_VERBOSE=1 prints every layer step's time to stderr.
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "store/checksum.h"
#include "store/drive_probe.h"
#include "store/expert_store.h"
#include "util/aligned.h"
#include "util/error.h"
#include "util/parse.h"
#include "util/timer.h"

namespace deltafin::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ','))
    if (!t.empty()) v.push_back(t);
  return v;
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

void drop_caches() {
  ::sync();
  if (FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w")) {
    std::fputs("1\n", f);
    std::fclose(f);
  }
}

// Writes the store: per drive one file "experts.bin"; returns GB/s written.
double write_store(const std::string& store, const std::vector<std::string>& drives,
                   const std::string& placement, uint64_t record, int layers, int experts) {
  const uint64_t stride = (record + 4095) / 4096 * 4096;
  const int n = static_cast<int>(drives.size());
  std::vector<int> fds;
  for (const auto& d : drives) {
    std::string p = d + "/experts.bin";
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create {}: {}", p, std::strerror(errno));
    fds.push_back(fd);
  }
  Manifest m;
  m.placement = placement;
  m.drives = drives;
  m.layouts = {{record, {{"blob", "U8", {static_cast<int64_t>(record)}, 0, record}}}};
  m.model_config = {{"synthetic", true}, {"layers", layers}, {"experts", experts}};
  m.source = {{"generator", "bench_store_stream"}, {"seed", 1}};
  std::vector<uint64_t> end(n, 0);
  AlignedArray<uint64_t> buf(stride / 8, 4096);
  uint64_t s = 1;
  Stopwatch sw;
  uint64_t written = 0;
  for (int l = 1; l <= layers; ++l) {
    for (int e = 0; e < experts; ++e) {
      for (size_t i = 0; i < buf.size(); ++i) {  // xorshift64: not compressible
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        buf[i] = s;
      }
      Record r{l, e, 0, record, xxh64(buf.data(), record), {}};
      const int idx = (l - 1) * experts + e;
      for (int d = 0; d < n; ++d) {
        if (placement == "stripe" && d != idx % n) continue;
        if (::pwrite(fds[d], buf.data(), stride, static_cast<off_t>(end[d])) != static_cast<ssize_t>(stride))
          fail("writing the store on {} failed: {}; check free space", drives[d], std::strerror(errno));
        r.copies.push_back({d, end[d]});
        end[d] += stride;
        written += stride;
      }
      m.records.push_back(std::move(r));
    }
  }
  for (int d = 0; d < n; ++d) {
    ::fsync(fds[d]);
    ::close(fds[d]);
    m.files.push_back({d, "experts.bin", end[d]});
  }
  m.complete = true;
  fs::create_directories(store);
  m.save(store + "/" + kManifestFile);
  return static_cast<double>(written) / sw.seconds() / 1e9;
}

struct Run {
  std::string mode;
  bool split = false;
  double seconds = 0, gbps = 0;
  uint64_t records = 0, split_records = 0, retried = 0;
  double layer_p50_ms = 0, layer_p99_ms = 0;
  std::vector<uint64_t> per_drive;
};

Run stream(const std::string& store, IoKind kind, int qd, bool split, bool pipelined, int topk,
           double seconds, bool verify, uint64_t seed) {
  IoOptions io;
  io.queue_depth = qd;
  auto engine = make_io_engine(kind, io);
  StoreOptions so;
  so.split_reads = split;
  so.verify_reads = verify;
  ExpertStore s(store, *engine, so);
  const Manifest& m = s.manifest();
  int layers = 0, experts = 0;
  for (const auto& r : m.records) {
    layers = std::max(layers, r.layer);
    experts = std::max(experts, r.expert + 1);
  }
  if (topk > experts) fail("--topk {} exceeds the {} experts per layer", topk, experts);
  const int window = pipelined ? 2 : 1;  // layers in flight
  std::vector<AlignedArray<uint8_t>> bufs;
  for (int i = 0; i < topk * window; ++i) bufs.emplace_back(s.buffer_bytes(m.records[0]), s.buffer_alignment());
  std::mt19937_64 rng(seed);
  std::vector<int> ids(experts);
  uint64_t step = 0;  // layer steps issued
  auto issue_layer = [&](uint64_t k) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int layer = static_cast<int>(k % layers) + 1;
    const int slot0 = static_cast<int>(k % window) * topk;
    for (int j = 0; j < topk; ++j)
      s.request(layer, ids[j], bufs[slot0 + j].data(), k * topk + j);
  };
  Run run;
  run.mode = pipelined ? "pipelined" : "barrier";
  run.split = split;
  std::vector<double> layer_s;
  std::vector<RecordCompletion> done;
  Stopwatch sw;
  for (int w = 0; w < window; ++w) issue_layer(step++);
  std::vector<int> landed(window, 0);  // records landed per layer slot
  uint64_t waiting_for = 0;             // the layer step whose records we wait for
  while (true) {
    Stopwatch lw;
    while (landed[waiting_for % window] < topk) {
      done.clear();
      s.wait(done, 1);
      for (const auto& c : done) {
        ++landed[(c.tag / topk) % window];
        run.records++;
        run.split_records += c.parts > 1;
        run.retried += c.attempts > c.parts;
      }
    }
    layer_s.push_back(lw.seconds());
    if (std::getenv("DELTAFIN_BENCH_VERBOSE"))
      std::fprintf(stderr, "  layer step %llu: %.1f ms\n", static_cast<unsigned long long>(waiting_for),
                   layer_s.back() * 1e3);
    landed[waiting_for % window] = 0;
    ++waiting_for;
    if (sw.seconds() >= seconds) break;
    issue_layer(step++);
  }
  // Drain what is still in flight (counted too).
  while (s.outstanding() > 0) {
    done.clear();
    s.wait(done, 1);
    for (const auto& c : done) {
      run.records++;
      run.split_records += c.parts > 1;
    }
  }
  run.seconds = sw.seconds();
  run.gbps = static_cast<double>(run.records * m.records[0].length) / run.seconds / 1e9;
  std::sort(layer_s.begin(), layer_s.end());
  run.layer_p50_ms = layer_s[layer_s.size() / 2] * 1e3;
  run.layer_p99_ms = layer_s[std::min(layer_s.size() - 1, layer_s.size() * 99 / 100)] * 1e3;
  for (int d = 0; d < s.drives().size(); ++d) run.per_drive.push_back(s.bytes_read(d));
  return run;
}

}  // namespace
}  // namespace deltafin::store

namespace deltafin::store {
namespace {

int run_main(int argc, char** argv) {
  CLI::App app{"bench_store_stream: expert reads through the store vs the drives' ceiling"};
  std::string drives_arg, store, placement = "mirror", io = "uring", results, record_arg = "17547264";
  int layers = 4, experts = 48, topk = 16, qd = 8, repeat = 2;
  double seconds = 3;
  bool keep = false, reuse = false, verify = false;
  app.add_option("--drives", drives_arg, "drive directories, comma-separated")->required();
  app.add_option("--store", store, "store directory (manifest)")->required();
  app.add_option("--placement", placement, "mirror | stripe")->capture_default_str();
  app.add_option("--record", record_arg, "record bytes")->capture_default_str();
  app.add_option("--layers", layers, "MoE layers")->capture_default_str();
  app.add_option("--experts", experts, "experts per layer")->capture_default_str();
  app.add_option("--topk", topk, "experts read per layer step")->capture_default_str();
  app.add_option("--qd", qd, "queue depth per drive")->capture_default_str();
  app.add_option("--io", io, "uring | pread")->capture_default_str();
  app.add_option("--seconds", seconds, "seconds per run")->capture_default_str();
  app.add_option("--repeat", repeat, "rounds of all modes")->capture_default_str();
  app.add_option("--results", results, "append a markdown report to this file");
  app.add_flag("--verify-reads", verify, "check every record's checksum");
  app.add_flag("--reuse", reuse, "reuse an existing store (do not write)");
  app.add_flag("--keep", keep, "keep the store files");
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::string> drives = split_list(drives_arg);
  const uint64_t record = parse_byte_size(record_arg, "--record");
  const IoKind kind = parse_io_kind(io);
  if (placement != "mirror" && placement != "stripe")
    fail("--placement: '{}' is not mirror or stripe", placement);
  DriveSet check(drives);  // clear error for a missing drive directory

  double write_gbps = 0;
  if (!reuse) {
    std::printf("writing %d x %d records of %llu bytes (%s) on %zu drive(s) ...\n", layers, experts,
                static_cast<unsigned long long>(record), placement.c_str(), drives.size());
    std::fflush(stdout);
    write_gbps = write_store(store, drives, placement, record, layers, experts);
    std::printf("written at %.2f GB/s\n", write_gbps);
  }
  std::vector<std::string> files;
  uint64_t fbytes = UINT64_MAX;
  for (const auto& d : drives) {
    files.push_back(d + "/experts.bin");
    fbytes = std::min<uint64_t>(fbytes, fs::file_size(files.back()));
  }
  const std::string load_before = [] {
    std::ifstream in("/proc/loadavg");
    std::string l;
    std::getline(in, l);
    return l;
  }();

  struct Row {
    std::string what;
    double gbps;
    double frac;
    std::string detail;
  };
  std::vector<Row> rows;
  json jruns = json::array();
  uint64_t seed = 1;
  auto ceiling = [&]() {
    drop_caches();
    auto offs = record_offsets(fbytes, record, 4096, seed++);
    ProbeResult p = probe_reads(kind, files, record, qd, seconds, offs);
    std::printf("ceiling        %6.2f GB/s  (%llu reads, p50 %.1f ms)\n", p.bytes_per_s / 1e9,
                static_cast<unsigned long long>(p.reads), p.percentile(0.5) * 1e3);
    std::fflush(stdout);
    jruns.push_back({{"mode", "ceiling"}, {"GBps", p.bytes_per_s / 1e9}, {"reads", p.reads},
                     {"p50_ms", p.percentile(0.5) * 1e3}});
    return p.bytes_per_s / 1e9;
  };
  std::vector<double> ceilings;
  std::vector<Run> runs;
  for (int r = 0; r < repeat; ++r) {
    ceilings.push_back(ceiling());
    for (bool pipelined : {false, true}) {
      for (bool split : {true, false}) {
        if (!split && (placement != "mirror" || drives.size() < 2)) continue;
        drop_caches();
        Run run = stream(store, kind, qd, split, pipelined, topk, seconds, verify, seed++);
        std::string pd;
        for (size_t d = 0; d < run.per_drive.size(); ++d)
          pd += fmt::format("{}{:.2f}", d ? "/" : "", run.per_drive[d] / 1e9);
        std::printf("%-9s split=%d %6.2f GB/s  (%llu records, %llu split, %llu retried; layer p50 %.1f ms p99 %.1f ms; GB per drive %s)\n",
                    run.mode.c_str(), split ? 1 : 0, run.gbps,
                    static_cast<unsigned long long>(run.records),
                    static_cast<unsigned long long>(run.split_records),
                    static_cast<unsigned long long>(run.retried), run.layer_p50_ms,
                    run.layer_p99_ms, pd.c_str());
        std::fflush(stdout);
        jruns.push_back({{"mode", run.mode}, {"split", split}, {"GBps", run.gbps},
                         {"records", run.records}, {"split_records", run.split_records}, {"retried", run.retried},
                         {"layer_p50_ms", run.layer_p50_ms}, {"layer_p99_ms", run.layer_p99_ms},
                         {"bytes_per_drive", run.per_drive}});
        runs.push_back(run);
      }
    }
  }
  ceilings.push_back(ceiling());
  const double ceil_mean = std::accumulate(ceilings.begin(), ceilings.end(), 0.0) / ceilings.size();
  std::printf("ceiling mean %.2f GB/s (min %.2f, max %.2f)\n", ceil_mean,
              *std::min_element(ceilings.begin(), ceilings.end()),
              *std::max_element(ceilings.begin(), ceilings.end()));
  // Median per mode over the rounds.
  std::vector<std::pair<std::string, std::vector<double>>> modes;
  for (const auto& r : runs) {
    std::string key = r.mode + (r.split ? " split" : " no-split");
    auto it = std::find_if(modes.begin(), modes.end(), [&](auto& m) { return m.first == key; });
    if (it == modes.end()) {
      modes.push_back({key, {}});
      it = modes.end() - 1;
    }
    it->second.push_back(r.gbps);
  }
  for (auto& [key, v] : modes) {
    std::sort(v.begin(), v.end());
    double med = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    std::printf("%-22s median %.2f GB/s = %.0f %% of the ceiling\n", key.c_str(), med,
                100.0 * med / ceil_mean);
    rows.push_back({key, med, med / ceil_mean, ""});
  }
  if (!results.empty()) {
    std::ofstream out(results, std::ios::app);
    out << "\n## bench_store_stream, " << utc_now() << "\n\nCommand: `bench_store_stream";
    for (int i = 1; i < argc; ++i) out << " " << argv[i];
    out << "`\n\n- " << layers << " layers x " << experts << " experts of " << record
        << " bytes, " << placement << " on " << drives.size() << " drive(s), top-" << topk
        << " per layer step, " << io << ", queue depth " << qd << " per drive, " << seconds
        << " s per run, " << repeat << " rounds" << (verify ? ", --verify-reads" : "") << "\n";
    out << "- load average at start (shared machine): " << load_before << "\n";
    out << "- ceiling (probe_reads over the same drives and record size, same run): ";
    for (size_t i = 0; i < ceilings.size(); ++i) out << (i ? ", " : "") << fmt::format("{:.2f}", ceilings[i]);
    out << fmt::format(" GB/s; mean {:.2f}\n\n", ceil_mean);
    out << "| mode | median GB/s | fraction of ceiling |\n|---|---:|---:|\n";
    for (const auto& r : rows) out << fmt::format("| {} | {:.2f} | {:.0f} % |\n", r.what, r.gbps, 100 * r.frac);
    out << "\n<details><summary>JSON</summary>\n\n```json\n" << json(jruns).dump(1) << "\n```\n</details>\n";
  }
  if (!keep && !reuse) {
    for (const auto& f : files) fs::remove(f);
    fs::remove(store + "/" + kManifestFile);
  }
  return 0;
}

}  // namespace
}  // namespace deltafin::store

int main(int argc, char** argv) {
  try {
    return deltafin::store::run_main(argc, argv);
  } catch (const deltafin::Error& e) {
    std::fprintf(stderr, "bench_store_stream: %s\n", e.what());
    return 1;
  }
}
