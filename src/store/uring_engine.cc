// The io_uring engine: one ring owned by the calling thread, registered
// files, reads submitted as soon as their drive has a free queue slot.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "store/io_op.h"
#include "util/error.h"

namespace deltafin::store::detail {
namespace {

constexpr uint64_t kMaxChunk = 1ull << 30;  // sqe length is 32-bit
constexpr unsigned kFixedFiles = 1024;      // sparse registered-file table

class UringEngine final : public IoEngine {
 public:
  explicit UringEngine(const IoOptions& o) : IoEngine(o), queues_(o.queue_depth) {
    // Room for queue_depth reads on each of up to 8 drives at once.
    sq_entries_ = static_cast<unsigned>(std::clamp(o.queue_depth * 8, 8, 4096));
    int r = io_uring_queue_init(sq_entries_, &ring_, 0);
    if (r < 0)
      fail("io_uring is unavailable here ({}); use --io pread", std::strerror(-r));
    fixed_ = io_uring_register_files_sparse(&ring_, kFixedFiles) == 0;
  }

  ~UringEngine() override {
    queues_.clear();
    // The kernel may still write into callers' buffers: wait for every read.
    while (in_kernel_ > 0) {
      io_uring_submit(&ring_);
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR) continue;
      if (r < 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --in_kernel_;
    }
    io_uring_queue_exit(&ring_);
  }

  IoKind kind() const override { return IoKind::Uring; }

  int open_file(const std::string& path, int drive) override {
    int id = open_and_register(path, drive);
    bool reg = false;
    if (fixed_ && static_cast<unsigned>(id) < kFixedFiles) {
      int fd = fds_[id];
      reg = io_uring_register_files_update(&ring_, static_cast<unsigned>(id), &fd, 1) == 1;
    }
    registered_.push_back(reg);
    return id;
  }

  void submit(const ReadRequest& r) override {
    check_request(r);
    queues_.push(make_op(r, file(r.file)));
    start_reads();
    flush();
  }

  size_t poll(std::vector<Completion>& out) override {
    pump();
    return deliver(out);
  }

  size_t wait(std::vector<Completion>& out, size_t min_count) override {
    const size_t need = std::min(min_count, outstanding());
    for (;;) {
      pump();
      if (!failed_.empty() || ready_.size() >= need) break;
      DF_CHECK(in_kernel_ > 0);
      // Submits anything the SQ still holds, then sleeps until a read lands.
      int r = io_uring_submit_and_wait(&ring_, 1);
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
        fail("io_uring wait failed: {}", std::strerror(-r));
    }
    return deliver(out);
  }

  bool cancel(uint64_t tag) override {
    ReadOp op;
    return queues_.cancel(tag, &op);
  }

  bool promote(uint64_t tag) override { return queues_.promote(tag); }

  size_t outstanding() const override {
    return queues_.waiting() + queues_.in_flight() + ready_.size();
  }

  uint64_t queued_bytes(int drive) const override { return queues_.queued_bytes(drive); }

 private:
  uint32_t alloc_slot(ReadOp op) {
    uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
      slots_[s] = std::move(op);
    } else {
      s = static_cast<uint32_t>(slots_.size());
      slots_.push_back(std::move(op));
    }
    return s;
  }

  void queue_sqe(uint32_t slot) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      flush();
      sqe = io_uring_get_sqe(&ring_);
    }
    DF_CHECK(sqe != nullptr);
    const ReadOp& op = slots_[slot];
    const int f = op.req.file;
    const unsigned len = static_cast<unsigned>(op.next_length(kMaxChunk));
    if (registered_[f]) {
      io_uring_prep_read(sqe, f, op.next_dest(), len, op.next_offset());
      sqe->flags |= IOSQE_FIXED_FILE;
    } else {
      io_uring_prep_read(sqe, fds_[f], op.next_dest(), len, op.next_offset());
    }
    io_uring_sqe_set_data64(sqe, slot);
    ++in_kernel_;
  }

  void start_reads() {
    ReadOp op;
    while (in_kernel_ < sq_entries_ && queues_.pop_startable(&op)) queue_sqe(alloc_slot(std::move(op)));
  }

  void flush() {
    int r = io_uring_submit(&ring_);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
      fail("io_uring submit failed: {}", std::strerror(-r));
  }

  // Applies every landed read, starts what can start.
  void pump() {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      uint32_t slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      int64_t res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_kernel_;
      ReadOp& op = slots_[slot];
      const FileInfo& f = file(op.req.file);
      if (opts_.fault)
        res = opts_.fault({op.req.file, op.next_offset(), op.next_length(kMaxChunk), res});
      std::string err;
      Step step = advance(op, res, f, opts_, &err);
      if (step == Step::Again) {
        queue_sqe(slot);
        continue;
      }
      queues_.finished(op.drive);
      queues_.add_bytes(op.drive, -static_cast<int64_t>(op.req.length));
      if (step == Step::Done)
        ready_.push_back(complete(op));
      else
        failed_.emplace_back(err, op.req.tag);
      free_.push_back(slot);
    }
    start_reads();
    flush();
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

  io_uring ring_{};
  unsigned sq_entries_ = 0;
  bool fixed_ = false;
  std::vector<bool> registered_;
  DriveQueues queues_;
  std::vector<ReadOp> slots_;
  std::vector<uint32_t> free_;
  size_t in_kernel_ = 0;  // sqes queued or submitted whose cqe has not been reaped
  std::deque<Completion> ready_;
  std::deque<ReadError> failed_;
};

}  // namespace

std::unique_ptr<IoEngine> make_uring_engine(const IoOptions& opts) {
  return std::make_unique<UringEngine>(opts);
}

}  // namespace deltafin::store::detail
