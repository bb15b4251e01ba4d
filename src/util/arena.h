// A large anonymous buffer for expert slots: huge pages where the kernel
// allows them, and every page faulted in when it is made.
//
// Why: O_DIRECT reads into pages that were never touched make the kernel
// allocate and zero them inside the read's submission (on the compute
// thread), and the first CPU access after the device wrote them faults
// again on some hypervisors. Measured on the development VM (PVM guest,
// bench/results/streaming-*.md): fresh 4 KiB pages made the first product
// over a just-read 17.5 MB expert 20x slower (5.4 ms vs 0.26 ms), and
// zeroing them cost 13-19 % of a 96-token streamed decode. Faulting them in
// once at start-up moves that cost out of the token loop; huge pages cut the
// page count 512x for the kernel's pinning of every direct read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltafin {

class ThreadPool;

class Arena {
 public:
  Arena() = default;
  // `bytes` (rounded up to the page size), page aligned, zeroed, resident.
  // The pages are faulted in by the pool's threads when one is given (the
  // kernel zeroes them: about 0.3-0.5 GB/s per thread on the development VM,
  // several GB/s per thread on bare metal). Throws std::bad_alloc when the
  // memory cannot be mapped.
  explicit Arena(size_t bytes, ThreadPool* pool = nullptr);
  ~Arena();
  Arena(Arena&& o) noexcept { *this = static_cast<Arena&&>(o); }
  Arena& operator=(Arena&& o) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  size_t size() const { return n_; }
  bool huge() const { return huge_; }  // the kernel accepted MADV_HUGEPAGE

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
  bool huge_ = false;
};

}  // namespace deltafin
