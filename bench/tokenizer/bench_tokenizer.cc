// Tokenizer throughput: encode and decode 1 MiB of mixed text.
//   bench_tokenizer MODEL_DIR [CORPUS.jsonl]
// CORPUS.jsonl is tests/npm/make_corpus.mjs's output (one JSON string per
// line); without it the text is read from /usr/share/common-licenses and
// /usr/share/doc/*/copyright. The text is cut to 1 MiB (at a character
// boundary) and encoded as one string, single-threaded; the best and median
// of 7 timed runs after one warm-up run are printed, in wall time and in the
// thread's CPU time.
#include <fmt/format.h>

#include <time.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "util/error.h"
#include "util/timer.h"

using deltafin::tokenizer::Tokenizer;

namespace {

constexpr size_t kBytes = 1 << 20;

// CPU time of this thread: on a shared machine it moves much less than wall time.
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string load_text(int argc, char** argv) {
  std::string text;
  if (argc > 2) {
    std::ifstream f(argv[2]);
    if (!f) deltafin::fail("{}: cannot read", argv[2]);
    std::string line;
    while (text.size() < kBytes && std::getline(f, line))
      if (!line.empty()) text += nlohmann::json::parse(line).get<std::string>();
  } else {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator("/usr/share/common-licenses")) files.push_back(e.path());
    for (const auto& e : std::filesystem::directory_iterator("/usr/share/doc"))
      if (std::filesystem::exists(e.path() / "copyright")) files.push_back(e.path() / "copyright");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (text.size() >= kBytes) break;
      if (std::filesystem::is_regular_file(f)) text += slurp(f);
    }
  }
  if (text.size() < kBytes) deltafin::fail("only {} bytes of text found; need {}", text.size(), kBytes);
  size_t cut = kBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return deltafin::tokenizer::utf8_lossy(text);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) {
      fmt::print(stderr, "usage: bench_tokenizer MODEL_DIR [CORPUS.jsonl]\n");
      return 2;
    }
    deltafin::Stopwatch load_sw;
    auto tok = Tokenizer::load(argv[1]);
    double load_s = load_sw.seconds();
    std::string text = load_text(argc, argv);
    std::vector<double> enc, dec, enc_cpu;
    std::vector<int32_t> ids;
    for (int run = 0; run < 8; ++run) {
      deltafin::Stopwatch sw;
      double c0 = thread_cpu_seconds();
      ids = tok->encode(text);
      double e = sw.seconds(), ec = thread_cpu_seconds() - c0;
      sw.reset();
      std::string back = tok->decode(ids);
      double d = sw.seconds();
      if (run == 0) {
        if (back != text) fmt::print("note: decode(encode(text)) != text (normalizer changed it)\n");
        continue;  // warm-up
      }
      enc.push_back(e);
      enc_cpu.push_back(ec);
      dec.push_back(d);
    }
    std::sort(enc.begin(), enc.end());
    std::sort(enc_cpu.begin(), enc_cpu.end());
    std::sort(dec.begin(), dec.end());
    double mib = static_cast<double>(text.size()) / (1 << 20);
    fmt::print("tokenizer: {} (loaded in {:.3f} s)\n", argv[1], load_s);
    fmt::print("text: {} bytes ({:.3f} MiB), {} tokens\n", text.size(), mib, ids.size());
    fmt::print("encode: best {:.3f} s, median {:.3f} s  ({:.1f} MiB/s, {:.0f} tokens/s at the median)\n", enc[0],
               enc[enc.size() / 2], mib / enc[enc.size() / 2], static_cast<double>(ids.size()) / enc[enc.size() / 2]);
    fmt::print("encode CPU time (this thread): best {:.3f} s, median {:.3f} s\n", enc_cpu[0], enc_cpu[enc_cpu.size() / 2]);
    fmt::print("decode: best {:.3f} s, median {:.3f} s\n", dec[0], dec[dec.size() / 2]);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_tokenizer: {}\n", e.what());
    return 1;
  }
}
