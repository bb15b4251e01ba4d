// Measures, in one run: the streaming read bandwidth of this machine (a
// vectorised sum over 512 MiB, 1 and 2 threads), then for each encoding a
// weight matrix of at least 64 MiB (encoded bytes) times n_rows = 1
// activation row (decode: GB/s of weight bytes and the fraction of the
// bandwidth) and n_rows = 64 (prefill: GFLOP/s). Medians over repetitions.
//
//   bench_kernels [--mib 64 | --kib 256] [--cols 7168] [--reps 9] [--isa avx512|avx2|scalar|all]
//                 [--threads 1,2] [--prefill-rows 64] [--only bf16,int4-g32,...]
//                 [--stat median|min|cpu]
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <ctime>
#include <thread>
#include <vector>

#include "kernels/kernels.h"
#include "util/aligned.h"
#include "util/thread_pool.h"

using namespace deltafin;
using namespace deltafin::kernels;

namespace {

// The statistic over repetitions: the median (what results report), or the
// minimum (--stat min: the least disturbed run, for tuning on a busy host).
bool g_use_min = false;
// --stat cpu: process CPU seconds instead of wall seconds (with 1 thread: the
// cost of the kernel itself on a host whose other tenants take the core away).
bool g_use_cpu = false;

double now_seconds() {
  timespec ts;
  clock_gettime(g_use_cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return g_use_min ? v.front() : v[v.size() / 2];
}

// Vectorised sums of n floats read as `streams` equal segments in lockstep
// (1: one sequential stream; 8: eight, as a GEMV over 8 rows reads them; the
// hardware prefetchers keep more requests in flight for several streams).
__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n, int streams) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const size_t seg = n / streams / 64 * 64;
  if (streams == 1) {  // four accumulators over consecutive vectors
    for (size_t i = 0; i < seg; i += 64)
      for (int k = 0; k < 4; ++k) acc[k] = _mm512_add_ps(acc[k], _mm512_load_ps(p + i + 16 * k));
  } else {
    for (size_t i = 0; i < seg; i += 16)
      for (int s = 0; s < streams; ++s) acc[s] = _mm512_add_ps(acc[s], _mm512_load_ps(p + s * seg + i));
  }
  float t[16], r = 0;
  for (int s = 0; s < 8; ++s) {
    _mm512_storeu_ps(t, acc[s]);
    for (float v : t) r += v;
  }
  return r;
}

__attribute__((target("avx2"))) float sum_avx2(const float* p, size_t n, int streams) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const size_t seg = n / streams / 32 * 32;
  if (streams == 1) {
    for (size_t i = 0; i < seg; i += 32)
      for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_load_ps(p + i + 8 * k));
  } else {
    for (size_t i = 0; i < seg; i += 8)
      for (int s = 0; s < streams; ++s) acc[s] = _mm256_add_ps(acc[s], _mm256_load_ps(p + s * seg + i));
  }
  float t[8], r = 0;
  for (int s = 0; s < 8; ++s) {
    _mm256_storeu_ps(t, acc[s]);
    for (float v : t) r += v;
  }
  return r;
}

float sum_stream(const float* p, size_t n, int streams) {
  if (__builtin_cpu_supports("avx512f")) return sum_avx512(p, n, streams);
  return sum_avx2(p, n, streams);
}

double best(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }

std::string loadavg() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  char line[128] = "?";
  if (f) {
    if (!std::fgets(line, sizeof line, f)) line[0] = 0;
    std::fclose(f);
  }
  std::string s(line);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// GB/s of a vectorised sum over `bytes`, split over `threads` threads.
double stream_bandwidth(const float* buf, size_t bytes, ThreadPool& pool, int reps, int streams) {
  const size_t n = bytes / 4;
  std::vector<double> t;
  volatile float sink = 0;
  for (int i = 0; i < reps + 1; ++i) {
    std::vector<float> part(static_cast<size_t>(pool.threads()));
    const int64_t per = static_cast<int64_t>(n / pool.threads());
    const double t0 = now_seconds();
    pool.parallel_for(pool.threads(), 1, [&](int64_t b, int64_t) {
      part[b] = sum_stream(buf + b * per, static_cast<size_t>(per), streams);
    });
    const double s = now_seconds() - t0;
    for (float f : part) sink = sink + f;
    if (i > 0) t.push_back(s);  // the first pass warms up
  }
  return bytes / median(t) / 1e9;
}

struct Matrix {
  AlignedArray<uint8_t> data, scales;
  WeightView view;
  int64_t bytes = 0;  // data + scales
};

Matrix make_matrix(Encoding enc, int64_t min_bytes, int64_t cols, uint32_t seed) {
  Matrix m;
  const int64_t rb = traits(enc).row_bytes(cols);
  const int64_t rows = (min_bytes + rb - 1) / rb;
  m.data = AlignedArray<uint8_t>(static_cast<size_t>(rows * rb), 4096);
  std::mt19937_64 rng(seed);
  uint8_t* d = m.data.data();
  // Random bytes; each encoding's bit patterns are then made valid/realistic.
  for (int64_t i = 0; i + 8 <= rows * rb; i += 8) {
    uint64_t v = rng();
    std::memcpy(d + i, &v, 8);
  }
  int64_t scale_bytes = 0;
  switch (enc) {
    case Encoding::F32:
      for (int64_t i = 0; i < rows * cols; ++i) {
        float f = static_cast<float>(static_cast<int32_t>(rng() % 2001) - 1000) * 1e-3f;
        std::memcpy(d + 4 * i, &f, 4);
      }
      break;
    case Encoding::BF16:
      for (int64_t i = 0; i < rows * cols; ++i) d[2 * i + 1] = static_cast<uint8_t>(0x3c + (d[2 * i + 1] & 0x83));
      break;
    case Encoding::FP8_B128:
      for (int64_t i = 0; i < rows * cols; ++i)
        if ((d[i] & 0x7f) == 0x7f) d[i] = 0x7e;
      scale_bytes = (rows + 127) / 128 * ((cols + 127) / 128) * 4;
      break;
    case Encoding::INT4_G32:
      scale_bytes = rows * (cols / 32) * 2;
      break;
    case Encoding::MXFP4_G32:
      scale_bytes = rows * (cols / 32);
      break;
  }
  m.scales = AlignedArray<uint8_t>(static_cast<size_t>(std::max<int64_t>(scale_bytes, 64)), 4096);
  for (int64_t i = 0; i < scale_bytes; ++i) m.scales[i] = static_cast<uint8_t>(rng());
  if (enc == Encoding::FP8_B128)
    for (int64_t i = 0; i < scale_bytes / 4; ++i) {
      float s = 1e-3f * static_cast<float>(1 + rng() % 100);
      std::memcpy(&m.scales[4 * i], &s, 4);
    }
  if (enc == Encoding::INT4_G32)
    for (int64_t i = 0; i < scale_bytes / 2; ++i) m.scales[2 * i + 1] = static_cast<uint8_t>(0x3c + (m.scales[2 * i + 1] & 0x81));
  if (enc == Encoding::MXFP4_G32)
    for (int64_t i = 0; i < scale_bytes; ++i) m.scales[i] = static_cast<uint8_t>(120 + m.scales[i] % 8);
  m.view.enc = enc;
  m.view.rows = rows;
  m.view.cols = cols;
  m.view.data = m.data.data();
  m.view.scales = m.scales.data();
  m.view.scale_stride = (cols + 127) / 128;
  m.bytes = rows * rb + scale_bytes;
  return m;
}

// Seconds of each of `reps` products (after one warm-up).
std::vector<double> time_matmul(const Matrix& m, const float* x, int64_t n_rows, float* y,
                                ThreadPool& pool, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps + 1; ++i) {
    const double t0 = now_seconds();
    matmul(m.view, x, n_rows, m.view.cols, y, m.view.rows, &pool);
    if (i > 0) t.push_back(now_seconds() - t0);
  }
  return t;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t kib = 64 * 1024, cols = 7168, prefill_rows = 64;
  int reps = 9;
  std::string isa_arg = "best", threads_arg = "1,2", only;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--mib") kib = std::stoll(v) * 1024;
    else if (a == "--kib") kib = std::stoll(v);  // small sizes: in-cache kernel speed
    else if (a == "--cols") cols = std::stoll(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--isa") isa_arg = v;
    else if (a == "--threads") threads_arg = v;
    else if (a == "--prefill-rows") prefill_rows = std::stoll(v);
    else if (a == "--only") only = v;
    else if (a == "--stat") {
      g_use_min = v == "min" || v == "cpu";
      g_use_cpu = v == "cpu";
    }
    else {
      std::fprintf(stderr, "bench_kernels: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::vector<int> threads;
  for (auto& t : split(threads_arg)) threads.push_back(std::stoi(t));
  std::vector<Isa> isas;
  if (isa_arg == "best") {
    isas.push_back(active_isa());
  } else {
    for (int i = kNumIsas - 1; i >= 0; --i) {
      const Isa isa = static_cast<Isa>(i);
      if (isa_supported(isa) && ((isa_arg == "all" && isa != Isa::Scalar) || isa_arg == isa_name(isa)))
        isas.push_back(isa);  // "all": the SIMD ones (scalar is a reference, ~100x slower)
    }
  }
  if (isas.empty()) {
    std::fprintf(stderr, "bench_kernels: ISA %s is not supported here\n", isa_arg.c_str());
    return 2;
  }

  std::printf("load average at start: %s\n\n", loadavg().c_str());
  // Streaming read bandwidth, same binary, same run: once at the start, and
  // again right before each row's decode timing (the host is shared, so the
  // fraction uses the bandwidth measured next to the product it divides).
  const size_t stream_bytes = size_t{512} << 20;
  AlignedArray<float> buf(stream_bytes / 4, 4096);
  for (size_t i = 0; i < stream_bytes / 4; ++i) buf[i] = static_cast<float>(i & 1023);
  const char* stat = g_use_min ? "best" : "median";
  std::printf("## Streaming read bandwidth (vectorised sum over 512 MiB, %s of %d)\n\n", stat, reps);
  std::printf("Each thread sums its half as 1 sequential stream, or as 8 segments read in lockstep.\n\n");
  std::printf("| threads | 1 stream GB/s | 8 streams GB/s |\n|---|---|---|\n");
  for (int th : threads) {
    ThreadPool pool(th);
    const double b1 = stream_bandwidth(buf.data(), stream_bytes, pool, reps, 1);
    const double b8 = stream_bandwidth(buf.data(), stream_bytes, pool, reps, 8);
    std::printf("| %d | %.1f | %.1f |\n", th, b1, b8);
  }
  std::fflush(stdout);

  std::printf("\n## Products (cols = %lld, weight matrix >= %.2f MiB encoded incl. scales, %d reps)\n\n",
              static_cast<long long>(cols), kib / 1024.0, reps);
  std::printf("decode: n_rows = 1, GB/s of weight bytes (data + scales); stream: the larger of the "
              "1- and 8-stream 512 MiB sums measured just before (%s); fraction = decode %s / stream %s.\n"
              "prefill: n_rows = %lld, GFLOP/s = 2 * rows * cols * n_rows / s (%s of %d).\n\n",
              stat, stat, stat, static_cast<long long>(prefill_rows), stat, std::max(1, reps / 3));
  std::printf("| encoding | isa | MiB | threads | stream GB/s | decode ms (%s) | decode GB/s (%s) | "
              "decode GB/s (best) | fraction | prefill GFLOP/s |\n", stat, stat);
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  AlignedArray<float> x(static_cast<size_t>(prefill_rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = nd(rng);
  const auto only_list = split(only);
  for (int e = 0; e < kNumEncodings; ++e) {
    const Encoding enc = static_cast<Encoding>(e);
    if (!only_list.empty() &&
        std::find(only_list.begin(), only_list.end(), std::string(encoding_name(enc))) == only_list.end())
      continue;
    Matrix m = make_matrix(enc, kib << 10, cols, 100 + e);
    AlignedArray<float> y(static_cast<size_t>(prefill_rows * m.view.rows));
    for (Isa isa : isas) {
      force_isa(isa);
      for (int th : threads) {
        ThreadPool pool(th);
        // The larger of the 1- and 8-stream sums: the harder reference.
        const double bw = std::max(stream_bandwidth(buf.data(), stream_bytes, pool, reps, 1),
                                   stream_bandwidth(buf.data(), stream_bytes, pool, reps, 8));
        const auto td = time_matmul(m, x.data(), 1, y.data(), pool, reps);
        const double t_stat = median(td), gbs = m.bytes / t_stat / 1e9;
        // Prefill is ~64x the work: fewer repetitions (scalar: just one).
        const int preps = isa == Isa::Scalar ? 1 : std::max(1, reps / 3);
        const auto tp = time_matmul(m, x.data(), prefill_rows, y.data(), pool, preps);
        const double gflops = 2.0 * m.view.rows * cols * prefill_rows / median(tp) / 1e9;
        std::printf("| %s | %s | %.2f | %d | %.1f | %.3f | %.1f | %.1f | %.0f%% | %.1f |\n",
                    std::string(encoding_name(enc)).c_str(), std::string(isa_name(isa)).c_str(),
                    m.bytes / 1048576.0, th, bw, t_stat * 1e3, gbs, m.bytes / best(td) / 1e9,
                    100.0 * gbs / bw, gflops);
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nload average at end: %s\n", loadavg().c_str());
  return 0;
}
