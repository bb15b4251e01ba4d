// A fixed pool of worker threads for data-parallel loops.
//
// A decode step runs hundreds of short loops (a few hundred microseconds
// each), so workers and the caller spin briefly (kSpinNs) before sleeping on
// a condition variable: a futex wake-up costs tens of microseconds on a VM.
//
// Contract 2: callers split *independent output elements* across threads
// (weight rows, heads, rows of a batch), never one reduction; so the result
// never depends on the thread count. parallel_for hands out fixed-size ranges.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deltafin {

class ThreadPool {
 public:
  // threads >= 1; the calling thread is one of them (threads-1 workers).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of `grain` (the last may be
  // shorter), spread over all threads; returns when every chunk is done.
  // REQUIRES: fn does not call parallel_for on this pool.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};         // workers still in the current job
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;                   // workers blocked on cv_work_ (under mu_)
  bool main_sleeping_ = false;         // parallel_for blocked on cv_done_ (under mu_)
};

// Number of threads to use when the user gives none: the machine's cores.
int default_thread_count();

}  // namespace deltafin
