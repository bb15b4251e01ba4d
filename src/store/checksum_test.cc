#include "store/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace deltafin::store {
namespace {

// The sanity buffer of xxHash's reference CLI (xxhsum's BMK_sanityCheck):
// byte i is the top byte of prime^(2^i) mod 2^32.
std::vector<uint8_t> sanity_buffer() {
  std::vector<uint8_t> b(101);
  uint32_t gen = 2654435761u;
  for (auto& x : b) {
    x = static_cast<uint8_t>(gen >> 24);
    gen *= gen;
  }
  return b;
}

TEST(Xxh64, PublishedVectors) {
  // From xxHash's reference sanity check (Cyan4973/xxHash, xxhsum).
  const uint64_t prime = 2654435761u;
  auto b = sanity_buffer();
  EXPECT_EQ(xxh64(nullptr, 0, 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64(nullptr, 0, prime), 0xAC75FDA2929B17EFull);
  EXPECT_EQ(xxh64(b.data(), 1, 0), 0x4FCE394CC88952D8ull);
  EXPECT_EQ(xxh64(b.data(), 1, prime), 0x739840CB819FA723ull);
  EXPECT_EQ(xxh64(b.data(), 14, 0), 0xCFFA8DB881BC3A3Dull);
  EXPECT_EQ(xxh64(b.data(), 14, prime), 0x5B9611585EFCC9CBull);
  EXPECT_EQ(xxh64(b.data(), 101, 0), 0x0EAB543384F878ADull);
  EXPECT_EQ(xxh64(b.data(), 101, prime), 0xCAA65939306F1E21ull);
  const char* a = "a";
  EXPECT_EQ(xxh64(a, 1, 0), 0xD24EC4F1A98C6E5Bull);
}

TEST(Xxh64, StreamingMatchesOneShotForAnySplit) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(5000);
  for (auto& x : data) x = static_cast<uint8_t>(rng());
  for (size_t n : {0u, 1u, 31u, 32u, 33u, 100u, 4999u, 5000u}) {
    const uint64_t want = xxh64(data.data(), n);
    for (int trial = 0; trial < 20; ++trial) {
      Xxh64 h;
      size_t i = 0;
      while (i < n) {
        size_t k = std::min<size_t>(n - i, rng() % 70);
        h.update(data.data() + i, k);
        i += k;
      }
      EXPECT_EQ(h.digest(), want) << n;
    }
  }
}

TEST(Xxh64, DetectsOneFlippedBit) {
  std::vector<uint8_t> data(17547264 / 64, 0x5a);
  uint64_t h0 = xxh64(data.data(), data.size());
  data[12345] ^= 0x10;
  EXPECT_NE(xxh64(data.data(), data.size()), h0);
}

}  // namespace
}  // namespace deltafin::store
