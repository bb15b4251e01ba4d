#include "store/checksum.h"

#include <cstring>

namespace deltafin::store {
namespace {

constexpr uint64_t P1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t P2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t P3 = 0x165667B19E3779F9ull;
constexpr uint64_t P4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t P5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Little-endian loads (the format is defined on little-endian words).
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap64(v);
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap32(v);
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}

inline uint64_t merge_round(uint64_t acc, uint64_t val) {
  acc ^= round(0, val);
  return acc * P1 + P4;
}

// Consumes whole 32-byte stripes of p[0..n); returns the bytes consumed.
inline size_t stripes(uint64_t v[4], const uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    v[0] = round(v[0], load64(p + i));
    v[1] = round(v[1], load64(p + i + 8));
    v[2] = round(v[2], load64(p + i + 16));
    v[3] = round(v[3], load64(p + i + 24));
  }
  return i;
}

inline void init(uint64_t v[4], uint64_t seed) {
  v[0] = seed + P1 + P2;
  v[1] = seed + P2;
  v[2] = seed;
  v[3] = seed - P1;
}

// The final mixing of the spec: `tail` holds the last total % 32 bytes.
uint64_t finish(const uint64_t v[4], uint64_t seed, uint64_t total, const uint8_t* tail,
                size_t n) {
  uint64_t h;
  if (total >= 32) {
    h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    for (int k = 0; k < 4; ++k) h = merge_round(h, v[k]);
  } else {
    h = seed + P5;
  }
  h += total;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    h ^= round(0, load64(tail + i));
    h = rotl(h, 27) * P1 + P4;
  }
  if (i + 4 <= n) {
    h ^= uint64_t{load32(tail + i)} * P1;
    h = rotl(h, 23) * P2 + P3;
    i += 4;
  }
  for (; i < n; ++i) {
    h ^= uint64_t{tail[i]} * P5;
    h = rotl(h, 11) * P1;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t v[4];
  init(v, seed);
  size_t used = stripes(v, p, n);
  return finish(v, seed, n, p + used, n - used);
}

Xxh64::Xxh64(uint64_t seed) : seed_(seed) { init(v_, seed); }

void Xxh64::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buffered_ + n < 32) {
    if (n) std::memcpy(buf_ + buffered_, p, n);
    buffered_ += n;
    return;
  }
  if (buffered_) {
    size_t take = 32 - buffered_;
    std::memcpy(buf_ + buffered_, p, take);
    stripes(v_, buf_, 32);
    p += take;
    n -= take;
    buffered_ = 0;
  }
  size_t used = stripes(v_, p, n);
  buffered_ = n - used;
  if (buffered_) std::memcpy(buf_, p + used, buffered_);
}

uint64_t Xxh64::digest() const { return finish(v_, seed_, total_, buf_, buffered_); }

}  // namespace deltafin::store
