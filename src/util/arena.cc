#include "util/arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

namespace deltafin {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
}  // namespace

Arena::Arena(size_t bytes) {
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
  // Fault every page in now (kernels before 5.14: touch one byte per page).
  if (madvise(p_, n_, MADV_POPULATE_WRITE) != 0)
    for (size_t i = 0; i < n_; i += page) p_[i] = 0;
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
