#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace deltafin {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i)
    workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
// How long a thread polls before it sleeps: about one short product.
constexpr int64_t kSpinNs = 50'000;

template <typename Pred>
bool spin_until(Pred done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kSpinNs);
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

void ThreadPool::run_chunks() {
  for (;;) {
    int64_t b = next_.fetch_add(grain_);
    if (b >= n_) return;
    (*fn_)(b, std::min(n_, b + grain_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lk(mu_);
      ++sleepers_;
      cv_work_.wait(lk, ready);
      --sleepers_;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      if (main_sleeping_) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  next_.store(0);
  active_.store(static_cast<int>(workers_.size()));
  generation_.fetch_add(1, std::memory_order_acq_rel);  // publishes the job
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (sleepers_ > 0) cv_work_.notify_all();
  }
  run_chunks();
  auto done = [&] { return active_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lk(mu_);
    main_sleeping_ = true;
    cv_done_.wait(lk, done);
    main_sleeping_ = false;
  }
  fn_ = nullptr;
}

int default_thread_count() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace deltafin
