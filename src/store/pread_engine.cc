// The pread engine: a pool of threads each doing blocking pread() calls, for
// systems without io_uring. Same queues, retries and completions as the
// io_uring engine.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "store/io_op.h"
#include "util/error.h"

namespace deltafin::store::detail {
namespace {

constexpr uint64_t kMaxChunk = 1ull << 30;

class PreadEngine final : public IoEngine {
 public:
  explicit PreadEngine(const IoOptions& o) : IoEngine(o), queues_(o.queue_depth) {
    int n = o.pread_threads > 0 ? o.pread_threads : std::min(o.queue_depth * 4, 64);
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { worker(); });
  }

  ~PreadEngine() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      queues_.clear();
    }
    cv_work_.notify_all();
    for (auto& t : workers_) t.join();  // reads in flight finish first
  }

  IoKind kind() const override { return IoKind::Pread; }

  int open_file(const std::string& path, int drive) override {
    std::lock_guard<std::mutex> lk(mu_);  // workers read files_ under mu_
    return open_and_register(path, drive);
  }

  void submit(const ReadRequest& r) override {
    check_request(r);
    {
      std::lock_guard<std::mutex> lk(mu_);
      queues_.push(make_op(r, file(r.file)));
    }
    cv_work_.notify_one();
  }

  size_t poll(std::vector<Completion>& out) override {
    std::lock_guard<std::mutex> lk(mu_);
    return deliver(out);
  }

  size_t wait(std::vector<Completion>& out, size_t min_count) override {
    std::unique_lock<std::mutex> lk(mu_);
    const size_t need = std::min(min_count, outstanding_locked());
    cv_done_.wait(lk, [&] { return !failed_.empty() || ready_.size() >= need; });
    return deliver(out);
  }

  bool cancel(uint64_t tag) override {
    std::lock_guard<std::mutex> lk(mu_);
    ReadOp op;
    return queues_.cancel(tag, &op);
  }

  bool promote(uint64_t tag) override {
    std::lock_guard<std::mutex> lk(mu_);
    return queues_.promote(tag);
  }

  size_t outstanding() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return outstanding_locked();
  }

  uint64_t queued_bytes(int drive) const override {
    std::lock_guard<std::mutex> lk(mu_);
    return queues_.queued_bytes(drive);
  }

 private:
  size_t outstanding_locked() const {
    return queues_.waiting() + queues_.in_flight() + ready_.size();
  }

  size_t deliver(std::vector<Completion>& out) {
    if (!failed_.empty()) {
      ReadError e = std::move(failed_.front());
      failed_.pop_front();
      throw e;
    }
    size_t n = ready_.size();
    for (auto& c : ready_) out.push_back(c);
    ready_.clear();
    return n;
  }

  void worker() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      ReadOp op;
      cv_work_.wait(lk, [&] { return stop_ || queues_.pop_startable(&op); });
      if (op.req.dest == nullptr) return;  // stopping, nothing taken
      const FileInfo f = file(op.req.file);
      const int fd = fds_[op.req.file];
      lk.unlock();
      std::string err;
      Step step;
      do {
        const uint64_t len = op.next_length(kMaxChunk);
        ssize_t r = ::pread(fd, op.next_dest(), len, static_cast<off_t>(op.next_offset()));
        int64_t res = r < 0 ? -static_cast<int64_t>(errno) : r;
        if (opts_.fault) res = opts_.fault({op.req.file, op.next_offset(), len, res});
        step = advance(op, res, f, opts_, &err);
      } while (step == Step::Again);
      lk.lock();
      queues_.finished(op.drive);
      queues_.add_bytes(op.drive, -static_cast<int64_t>(op.req.length));
      if (step == Step::Done)
        ready_.push_back(complete(op));
      else
        failed_.emplace_back(err, op.req.tag);
      cv_done_.notify_all();
      cv_work_.notify_one();  // a queue slot of this drive is free
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<std::thread> workers_;
  DriveQueues queues_;
  std::deque<Completion> ready_;
  std::deque<ReadError> failed_;
  bool stop_ = false;
};

}  // namespace

std::unique_ptr<IoEngine> make_pread_engine(const IoOptions& opts) {
  return std::make_unique<PreadEngine>(opts);
}

}  // namespace deltafin::store::detail
