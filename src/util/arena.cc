#include "util/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "util/thread_pool.h"

namespace deltafin {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
}  // namespace

Arena::Arena(size_t bytes, ThreadPool* pool) {
  if (bytes == 0) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  n_ = (bytes + page - 1) / page * page;
  // Over-map by one huge page so the buffer can start on a huge-page boundary.
  const size_t map = n_ + kHuge;
  void* m = mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<uint8_t*>(m);
  auto* start = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) / kHuge * kHuge);
  if (start > base) munmap(base, static_cast<size_t>(start - base));
  const size_t tail = static_cast<size_t>(base + map - (start + n_));
  if (tail > 0) munmap(start + n_, tail);
  p_ = start;
  huge_ = madvise(p_, n_, MADV_HUGEPAGE) == 0;
  // Fault every page in now, in huge-page-aligned pieces over the pool's
  // threads (kernels before 5.14: touch one byte per page).
  const size_t piece = std::max(kHuge, n_ / 64 / kHuge * kHuge);
  auto fault_in = [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      uint8_t* at = p_ + static_cast<size_t>(k) * piece;
      const size_t len = std::min(piece, n_ - static_cast<size_t>(k) * piece);
      if (madvise(at, len, MADV_POPULATE_WRITE) != 0)
        for (size_t i = 0; i < len; i += page) at[i] = 0;
    }
  };
  const int64_t pieces = static_cast<int64_t>((n_ + piece - 1) / piece);
  if (pool) pool->parallel_for(pieces, 1, fault_in);
  else fault_in(0, pieces);
}

Arena::~Arena() {
  if (p_) munmap(p_, n_);
}

Arena& Arena::operator=(Arena&& o) noexcept {
  if (this != &o) {
    if (p_) munmap(p_, n_);
    p_ = o.p_;
    n_ = o.n_;
    huge_ = o.huge_;
    o.p_ = nullptr;
    o.n_ = 0;
    o.huge_ = false;
  }
  return *this;
}

}  // namespace deltafin
