// Record checksums: XXH64 (Yann Collet's xxHash, 64-bit variant), written
// from its specification. Used by `deltafin pack` (one checksum per record,
// stored in the manifest), `deltafin verify` and `--verify-reads`.
//
// Why XXH64: 64 bits make an accidental match on a corrupt 17.5 MB record
// negligible, it needs no special instructions (about 10+ GB/s on one core,
// faster than one drive), and its published test vectors pin it down.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltafin::store {

// XXH64 of bytes [data, data + n) with `seed` (the store uses seed 0).
uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);

// Streaming form: the digest of all update()s equals xxh64() of their
// concatenation, however the input is split (pack writes a record tensor by
// tensor).
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  // May be called at any point; update() may continue afterwards.
  uint64_t digest() const;

 private:
  uint64_t v_[4];
  uint64_t seed_;
  uint64_t total_ = 0;
  uint8_t buf_[32];
  size_t buffered_ = 0;
};

}  // namespace deltafin::store
