// Aligned, uninitialised float/byte buffers for kernels and O_DIRECT I/O.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace deltafin {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Allocates `bytes` rounded up to `align` (a power of two), aligned to it.
inline void* aligned_alloc_bytes(size_t bytes, size_t align = 64) {
  size_t n = (bytes + align - 1) / align * align;
  if (n == 0) n = align;
  void* p = std::aligned_alloc(align, n);
  if (!p) throw std::bad_alloc();
  return p;
}

// A fixed-size array of T, 64-byte aligned, contents uninitialised unless zeroed.
template <typename T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(size_t n, size_t align = 64)
      : p_(static_cast<T*>(aligned_alloc_bytes(n * sizeof(T), align))), n_(n) {}
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_.get()[i]; }
  const T& operator[](size_t i) const { return p_.get()[i]; }
  void zero() { std::memset(p_.get(), 0, n_ * sizeof(T)); }
  // Grows (never shrinks) to at least n elements; contents are not kept.
  void reserve_discard(size_t n) {
    if (n > n_) *this = AlignedArray(n);
  }

 private:
  std::unique_ptr<T, FreeDeleter> p_;
  size_t n_ = 0;
};

}  // namespace deltafin
