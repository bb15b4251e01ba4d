// Runs a fuzz target without libFuzzer (gcc builds, CI): every file of its
// seed corpus, then a fixed number of deterministic mutations of each, so the
// sanitizer build exercises the parser on malformed input on every test run.
// With DELTAFIN_FUZZ (clang -fsanitize=fuzzer) libFuzzer's main is used instead.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS]\n", argv[0]);
    return 2;
  }
  const int mutations = argc > 2 ? std::atoi(argv[2]) : 2000;
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(e.path(), std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds in %s\n", argv[1]);
    return 1;
  }
  std::mt19937_64 rng(12345);
  long runs = 0;
  for (const auto& s : seeds) {
    LLVMFuzzerTestOneInput(s.data(), s.size());
    ++runs;
    for (int m = 0; m < mutations; ++m) {
      std::vector<uint8_t> v = s;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits; ++k) {
        switch (rng() % 4) {
          case 0: if (!v.empty()) v[rng() % v.size()] = static_cast<uint8_t>(rng()); break;
          case 1: if (!v.empty()) v.resize(rng() % v.size()); break;
          case 2: v.insert(v.begin() + (v.empty() ? 0 : rng() % v.size()), static_cast<uint8_t>(rng())); break;
          case 3: if (v.size() > 8) v[rng() % 8] = static_cast<uint8_t>(rng()); break;  // header length
        }
      }
      // Exact-size heap copy so ASan catches reads past the end.
      std::vector<uint8_t> exact(v.begin(), v.end());
      LLVMFuzzerTestOneInput(exact.data(), exact.size());
      ++runs;
    }
  }
  std::printf("%ld inputs, no crash\n", runs);
  return 0;
}
